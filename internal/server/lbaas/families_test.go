package lbaas

import (
	"testing"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

func TestAllowedCIDRFamilies(t *testing.T) {
	lb := func(vip string, more ...string) *LoadBalancer {
		l := &LoadBalancer{VIPAddress: vip}
		for _, a := range more {
			l.AdditionalVIPs = append(l.AdditionalVIPs, AdditionalVIP{IPAddress: a})
		}
		return l
	}
	for _, tc := range []struct {
		name  string
		lb    *LoadBalancer
		cidrs []string
		err   *Error // nil: accepted
		msg   string
	}{
		{"IPv4 on IPv4", lb("198.19.0.1"), []string{"198.18.0.0/16", "0.0.0.0/0"}, nil, ""},
		{"IPv6 on IPv6", lb("2001:2::5"), []string{"2001:2::/48", "::/0"}, nil, ""},
		{"IPv6 on IPv4", lb("198.19.0.1"), []string{"198.18.0.0/16", "2001:2::/48"}, ErrInvalid,
			"CIDR 2001:2::/48 IP version incompatible with all VIPs ['198.19.0.1'] IP version."},
		{"IPv4 on IPv6", lb("2001:2::5"), []string{"198.18.0.0/16"}, ErrInvalid,
			"CIDR 198.18.0.0/16 IP version incompatible with all VIPs ['2001:2::5'] IP version."},
		{"both on dual stack (IPv6 additional)", lb("198.19.0.1", "2001:2::5"), []string{"198.18.0.0/16", "2001:2::/48"}, nil, ""},
		{"both on dual stack (IPv4 additional)", lb("2001:2::5", "198.19.0.1"), []string{"2001:2::/48", "198.18.0.0/16"}, nil, ""},
		{"IPv6 on two IPv4 VIPs", lb("198.19.0.1", "198.19.0.2"), []string{"2001:2::/48"}, ErrInvalid,
			"CIDR 2001:2::/48 IP version incompatible with all VIPs ['198.19.0.1', '198.19.0.2'] IP version."},
		{"not a prefix", lb("198.19.0.1"), []string{"198.18.0.0/33"}, ErrInvalid,
			"Invalid input for field/attribute allowed_cidrs. Value: '198.18.0.0/33'."},
		{"none", lb("2001:2::5"), nil, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkAllowedCIDRs(tc.lb, tc.cidrs)
			if tc.err == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			wantErr(t, err, tc.err, tc.msg)
			if de := err.(*Error); de.Detail != tc.msg {
				t.Fatalf("message %q, want exactly %q", de.Detail, tc.msg)
			}
		})
	}
}

func TestVIPSubnetsOnePerSubnet(t *testing.T) {
	avs := func(subnets ...string) []AdditionalVIP {
		var out []AdditionalVIP
		for _, s := range subnets {
			out = append(out, AdditionalVIP{SubnetID: s})
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		vip        string
		additional []AdditionalVIP
		ok         bool
	}{
		{"none", "v4", nil, true},
		{"another subnet", "v4", avs("v6"), true},
		{"two others", "v4", avs("v6", "v4b"), true},
		{"the VIP's", "v4", avs("v4"), false},
		{"twice the same", "v4", avs("v6", "v6"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkVIPSubnets(tc.vip, tc.additional)
			if tc.ok != (err == nil) {
				t.Fatalf("got %v, want ok=%v", err, tc.ok)
			}
			if err != nil {
				wantErr(t, err, ErrInvalid, "Duplicate VIP subnet(s) specified. Only one IP can be bound per subnet.")
			}
		})
	}
}

// A load balancer with VIPs of both families takes listeners with source
// ranges and pools with members (and monitor addresses) of both; the
// rules across families are Octavia's.
func TestDualStackLoadBalancer(t *testing.T) { eachEngine(t, testDualStackLoadBalancer) }

func testDualStackLoadBalancer(t *testing.T, st store.Store) {
	e := newEnv(t, true, st)
	_, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"additional_vips": [{"subnet_id": "sub-6"}, {"subnet_id": "sub-6"}]`))
	wantErr(t, err, ErrInvalid, "Duplicate VIP subnet(s) specified. Only one IP can be bound per subnet.")
	_, err = e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"additional_vips": [{"subnet_id": "other-net-6", "ip_address": "2001:2::9"}]`))
	wantErr(t, err, ErrInvalid, "All VIP subnets must belong to the same network.")
	if n := countLBs(t, e); n != 0 {
		t.Fatalf("%d load balancers stored after refusals", n)
	}

	v4only, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"vip_address": "198.19.0.7"`))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = e.svc.CreateListener(e.ctx, ListenerCreate{LoadBalancerID: v4only.LB.ID, Protocol: "TCP", ProtocolPort: 80,
		ListenerUpdate: ListenerUpdate{AllowedCIDRs: Some([]string{"2001:2::/48"})}})
	wantErr(t, err, ErrInvalid, "CIDR 2001:2::/48 IP version incompatible with all VIPs ['198.19.0.7'] IP version.")

	tr, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"vip_address": "198.19.0.8",
		"additional_vips": [{"subnet_id": "sub-6", "ip_address": "2001:2::8"}],
		"listeners": [{"protocol": "TCP", "protocol_port": 80, "allowed_cidrs": ["198.18.0.0/16", "2001:2::/48"], "default_pool": {"name": "web"}}],
		"pools": [{"name": "web", "protocol": "TCP", "lb_algorithm": "SOURCE_IP_PORT", "members": [
			{"address": "198.18.17.2", "protocol_port": 8080},
			{"address": "2001:2::11:2", "protocol_port": 8080, "monitor_address": "2001:2::11:3", "monitor_port": 8081}]}]`))
	if err != nil {
		t.Fatalf("dual-stack load balancer: %v", err)
	}
	if got := tr.LB.AdditionalVIPs; len(got) != 1 || got[0].IPAddress != "2001:2::8" || got[0].SubnetID != "sub-6" {
		t.Fatalf("additional VIPs %+v", got)
	}
	if len(tr.Members) != 2 {
		t.Fatalf("members %+v, want both families", tr.Members)
	}
	// An IPv6 member on an IPv4-only load balancer is accepted, as by
	// Octavia's API: it gets no traffic until an IPv6 VIP is added.
	_, pool, err := e.svc.CreatePool(e.ctx, req[PoolCreate](t, `{"loadbalancer_id": "`+v4only.LB.ID+`", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, m, err := e.svc.CreateMember(e.ctx, pool.ID, req[MemberCreate](t, `{"address": "2001:2::11:4", "protocol_port": 80, "monitor_address": "198.18.17.4"}`))
	if err != nil || m.Address != "2001:2::11:4" {
		t.Fatalf("IPv6 member of an IPv4 load balancer: %+v %v", m, err)
	}
}

// lookupVIPs is fakeVIPs that knows which subnets exist.
type lookupVIPs struct{ *fakeVIPs }

func (lookupVIPs) CheckSubnet(_ store.ReadTx, _ Access, id string) error {
	if id == "missing" {
		return Invalid("Subnet %s not found.", id)
	}
	return nil
}

// A missing additional VIP subnet is a validation failure (Octavia's
// words, without the period of a missing VIP subnet), found before any
// address is allocated.
func TestAdditionalVIPSubnetMissing(t *testing.T) {
	e := newEnv(t, true, memstore.New())
	vips := lookupVIPs{&fakeVIPs{}}
	svc, err := New(e.st, vips, []Provider{e.prov}, Config{DefaultProvider: "fake"}, e.svc.log)
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.CreateLoadBalancer(e.ctx, lbReq(t, `"additional_vips": [{"subnet_id": "missing"}, {"subnet_id": "other-net-6"}]`))
	wantErr(t, err, ErrInvalid, "Subnet missing not found")
	if de := err.(*Error); !de.Validation || de.Detail != "Subnet missing not found" {
		t.Fatalf("refusal %+v", de)
	}
	if vips.next != 1 {
		t.Fatalf("%d addresses allocated, want only the VIP's", vips.next)
	}
}
