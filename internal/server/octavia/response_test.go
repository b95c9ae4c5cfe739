package octavia

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/lbaas"
)

// jsonNames are the JSON member names of struct type t, embedded
// structs' in their place, and its filter-only attributes.
func jsonNames(t reflect.Type) (answered, filterOnly []string) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case f.Anonymous && f.Type.Kind() == reflect.Struct:
			a, o := jsonNames(f.Type)
			answered, filterOnly = append(answered, a...), append(filterOnly, o...)
		case name == "-":
			if tag, _, _ := strings.Cut(f.Tag.Get("filter"), ","); tag != "" {
				filterOnly = append(filterOnly, tag)
			}
		case f.IsExported():
			if name == "" {
				name = f.Name
			}
			answered = append(answered, name)
		}
	}
	return answered, filterOnly
}

// TestResponseTypes: every type an answer is made of declares its JSON
// members in the order of their names (the answers' bytes have always
// had them sorted), and each kind's response type answers every
// attribute of the domain's object, less the ones only lists see, plus
// what Octavia adds (tenant_id and the references).
func TestResponseTypes(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var sorted func(typ reflect.Type)
	sorted = func(typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] {
			return
		}
		seen[typ] = true
		names, _ := jsonNames(typ)
		if !slices.IsSorted(names) {
			t.Errorf("%v: members %v are not in the order of their names", typ, names)
		}
		for i := range typ.NumField() {
			sorted(typ.Field(i).Type)
		}
	}
	for _, v := range []any{LoadBalancerRoot{}, LoadBalancerFullRoot{}, LoadBalancersPage{}, ListenerRoot{}, ListenersPage{}, PoolRoot{},
		PoolsPage{}, MemberRoot{}, MembersPage{}, HealthMonitorRoot{}, HealthMonitorsPage{}, L7PolicyRoot{}, L7PoliciesPage{}, L7RuleRoot{},
		L7RulesPage{}, FlavorRoot{}, FlavorsPage{}, FlavorProfileRoot{}, FlavorProfilesPage{}, AvailabilityZoneRoot{}, AvailabilityZonesPage{},
		AvailabilityZoneProfileRoot{}, AvailabilityZoneProfilesPage{}, QuotaRoot{}, QuotasPage{}, StatsRoot{}, StatusRoot{}, ProvidersRoot{},
		FlavorCapabilitiesRoot{}, AvailabilityZoneCapabilitiesRoot{}, AmphoraePage{}, VersionsRoot{}} {
		sorted(reflect.TypeOf(v))
	}

	refs := func(extra ...string) []string { return append([]string{"tenant_id"}, extra...) }
	for _, tc := range []struct {
		response, domain any
		added            []string
	}{
		{LoadBalancerResponse{}, lbaas.LoadBalancer{}, refs("listeners", "pools")},
		{LoadBalancerFullResponse{}, lbaas.LoadBalancer{}, refs("listeners", "pools")},
		{ListenerResponse{}, lbaas.Listener{}, refs("loadbalancers", "l7policies")},
		{ListenerFullResponse{}, lbaas.Listener{}, refs("loadbalancers", "l7policies")},
		{PoolResponse{}, lbaas.Pool{}, refs("loadbalancers", "listeners", "members", "healthmonitor_id")},
		{PoolFullResponse{}, lbaas.Pool{}, refs("loadbalancers", "listeners", "members", "healthmonitor_id", "healthmonitor")},
		{MemberResponse{}, lbaas.Member{}, refs()},
		{HealthMonitorResponse{}, lbaas.HealthMonitor{}, refs("pools")},
		{L7PolicyResponse{}, lbaas.L7Policy{}, refs("rules")},
		{L7PolicyFullResponse{}, lbaas.L7Policy{}, refs("rules")},
		{L7RuleResponse{}, lbaas.L7Rule{}, refs()},
		{FlavorResponse{}, lbaas.Flavor{}, nil},
		{FlavorProfileResponse{}, lbaas.FlavorProfile{}, nil},
		{AvailabilityZoneResponse{}, lbaas.AvailabilityZone{}, nil},
		{AvailabilityZoneProfileResponse{}, lbaas.AZProfile{}, nil},
		{SessionPersistenceResponse{}, lbaas.SessionPersistence{}, nil},
		{AdditionalVIPResponse{}, lbaas.AdditionalVIP{}, nil},
		{CapabilityResponse{}, lbaas.Capability{}, nil},
	} {
		answered, filterOnly := jsonNames(reflect.TypeOf(tc.response))
		domain, _ := jsonNames(reflect.TypeOf(tc.domain))
		want := map[string]bool{}
		for _, k := range append(domain, tc.added...) {
			want[k] = true
		}
		got := map[string]bool{}
		for _, k := range append(answered, filterOnly...) {
			got[k] = true
		}
		if _, full := tc.response.(PoolFullResponse); full {
			// Never in a list: no filter-only attributes.
			for _, k := range domain {
				if !slices.Contains(answered, k) {
					delete(want, k)
				}
			}
		}
		if !maps.Equal(got, want) {
			t.Errorf("%T: answers %v and filters on %v; the domain's %T has %v, and Octavia adds %v",
				tc.response, answered, filterOnly, tc.domain, domain, tc.added)
		}
	}
}

func TestPick(t *testing.T) {
	for _, tc := range []struct {
		answer, list string
		fields       []string
		want         string
	}{
		{`{"loadbalancer":{"a":1,"b":[1,{"c":2}],"c":"\u003c"}}` + "\n", "", []string{"c", "a", "c", "x"},
			`{"loadbalancer":{"a":1,"c":"\u003c"}}` + "\n"},
		{`{"loadbalancer":{"a":1}}` + "\n", "", []string{"x"}, `{"loadbalancer":{}}` + "\n"},
		{`{"flavorprofile_links":[{"href":"h","rel":"next"}],"flavorprofiles":[{"id":"1","name":"n"},{"id":"2","name":"m"}]}` + "\n",
			"flavorprofiles", []string{"name"},
			`{"flavorprofile_links":[{"href":"h","rel":"next"}],"flavorprofiles":[{"name":"n"},{"name":"m"}]}` + "\n"},
		{`{"pools":[],"pools_links":[]}` + "\n", "pools", []string{"id"}, `{"pools":[],"pools_links":[]}` + "\n"},
	} {
		got, err := pick([]byte(tc.answer), tc.list, tc.fields)
		if err != nil || string(got) != tc.want {
			t.Errorf("pick %s of %s: %s (%v), want %s", tc.fields, tc.answer, got, err, tc.want)
		}
	}
}
