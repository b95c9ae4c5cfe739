package neutron

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
)

// testdata/legacy_ipam.json holds the network, subnet and port records
// that the bitmap IPAM wrote (dumped from the code before claims):
//   - 10.0.0.0/21 with the pool 10.0.3.250–10.0.4.9 (16 addresses, across
//     a chunk edge): 12 VIPs allocated, those of 10.0.3.252 and 10.0.4.1
//     released, 10.0.6.7 requested outside the pool; cursor 10.0.4.6;
//   - fd00:5::/64: fd00:5::2–4 allocated, fd00:5::ab:cdef requested;
//     cursor fd00:5::5.
type legacyFixture struct {
	v4, v6 string         // subnet ids
	ports  map[string]VIP // by address
}

func loadLegacyFixture(t *testing.T, e *env) legacyFixture {
	t.Helper()
	raw, err := os.ReadFile("testdata/legacy_ipam.json")
	if err != nil {
		t.Fatal(err)
	}
	var recs []struct {
		Kind, ID, ProjectID, LoadBalancerID, ParentID string
		Data                                          json.RawMessage
	}
	if err := json.Unmarshal(raw, &recs); err != nil {
		t.Fatal(err)
	}
	f := legacyFixture{ports: map[string]VIP{}}
	err = e.update(func(tx store.Tx) error {
		for _, r := range recs {
			if err := tx.Insert(store.Record{Kind: store.Kind(r.Kind), ID: r.ID, ProjectID: r.ProjectID, LoadBalancerID: r.LoadBalancerID, ParentID: r.ParentID, Data: r.Data}); err != nil {
				return err
			}
			var doc struct {
				CIDR     string    `json:"cidr"`
				FixedIPs []FixedIP `json:"fixed_ips"`
			}
			if err := json.Unmarshal(r.Data, &doc); err != nil {
				return err
			}
			switch {
			case r.Kind == string(store.KindSubnet) && doc.CIDR == "10.0.0.0/21":
				f.v4 = r.ID
			case r.Kind == string(store.KindSubnet) && doc.CIDR == "fd00:5::/64":
				f.v6 = r.ID
			case r.Kind == string(store.KindPort):
				f.ports[doc.FixedIPs[0].IPAddress] = VIP{Address: doc.FixedIPs[0].IPAddress, PortID: r.ID, SubnetID: doc.FixedIPs[0].SubnetID}
			}
		}
		return nil
	})
	if err != nil || f.v4 == "" || f.v6 == "" || len(f.ports) != 15 {
		t.Fatalf("load fixture: %v (subnets %q %q, %d ports)", err, f.v4, f.v6, len(f.ports))
	}
	// The fixture's ids are fixed: start each engine's run afresh.
	processHints.forget(f.v4)
	processHints.forget(f.v6)
	return f
}

// A database the bitmap IPAM wrote goes on without giving an address twice:
// the free addresses come out in the old cursor's order, the held ones are
// refused, a released one comes back, and the bitmap records are gone.
func TestLegacyIPAMIsConverted(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		f := loadLegacyFixture(t, e)
		before := e.subnetAPI(f.v4)
		var got []string
		for {
			v, err := e.allocate(VIPRequest{SubnetID: f.v4, LoadBalancerID: "new"})
			if err != nil {
				if !refusedAs(err, lbaas.ErrConflict, "No more IP addresses available") {
					t.Fatalf("after %v: %v", got, err)
				}
				break
			}
			got = append(got, v.Address)
		}
		if want := []string{"10.0.4.6", "10.0.4.7", "10.0.4.8", "10.0.4.9", "10.0.3.252", "10.0.4.1"}; !slices.Equal(got, want) {
			t.Fatalf("free addresses given out %v, want %v", got, want)
		}
		for _, a := range []string{"10.0.6.7", "10.0.3.250", "10.0.4.0"} {
			if _, err := e.allocate(VIPRequest{SubnetID: f.v4, LoadBalancerID: "new", Address: a}); !refusedAs(err, lbaas.ErrConflict, "already allocated") {
				t.Fatalf("held address %s: %v", a, err)
			}
		}
		e.release(f.ports["10.0.3.250"].PortID)
		if v, err := e.allocate(VIPRequest{SubnetID: f.v4, LoadBalancerID: "new"}); err != nil || v.Address != "10.0.3.250" {
			t.Fatalf("after releasing a converted address: %+v %v", v, err)
		}
		if after := e.subnetAPI(f.v4); after != before {
			t.Fatalf("API subnet changed by the conversion:\n%s\n%s", before, after)
		}
		e.checkConverted(f.v4)

		v, err := e.allocate(VIPRequest{SubnetID: f.v6, LoadBalancerID: "new"})
		if err != nil || v.Address != "fd00:5::5" {
			t.Fatalf("IPv6 after conversion: %+v %v", v, err)
		}
		for _, a := range []string{"fd00:5::3", "fd00:5::ab:cdef"} {
			if _, err := e.allocate(VIPRequest{SubnetID: f.v6, LoadBalancerID: "new", Address: a}); !refusedAs(err, lbaas.ErrConflict, "already allocated") {
				t.Fatalf("held address %s: %v", a, err)
			}
		}
		e.checkConverted(f.v6)
	})
}

// Deleting a subnet still in the bitmap scheme sees its addresses.
func TestLegacySubnetInUseIsNotDeleted(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		f := loadLegacyFixture(t, e)
		err := e.update(func(tx store.Tx) error { return deleteSubnet(tx, f.v6) })
		var ne *Error
		if !errors.As(err, &ne) || ne.Type != "SubnetInUse" {
			t.Fatalf("delete a subnet with legacy allocations: %v", err)
		}
	})
}

// Clients that meet a subnet still in the bitmap scheme at once convert it
// once between them and share out exactly its free addresses.
func TestLegacyConversionUnderConcurrency(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		f := loadLegacyFixture(t, e)
		const clients = 8
		var mu sync.Mutex
		var got []string
		var wg sync.WaitGroup
		for i := range clients {
			wg.Go(func() {
				for {
					v, err := e.allocate(VIPRequest{SubnetID: f.v4, LoadBalancerID: fmt.Sprint("lb-", i)})
					if refusedAs(err, lbaas.ErrConflict, "No more IP addresses available") {
						return
					}
					if err != nil {
						t.Errorf("client %d: %v", i, err)
						return
					}
					mu.Lock()
					got = append(got, v.Address)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		slices.Sort(got)
		if want := []string{"10.0.3.252", "10.0.4.1", "10.0.4.6", "10.0.4.7", "10.0.4.8", "10.0.4.9"}; !slices.Equal(got, want) {
			t.Fatalf("given out %v, want the free %v", got, want)
		}
		e.checkConverted(f.v4)
	})
}

// subnetAPI is a subnet as the API shows it.
func (e *env) subnetAPI(id string) string {
	e.t.Helper()
	var out string
	err := e.st.View(e.t.Context(), func(tx store.ReadTx) error {
		s, err := GetSubnet(tx, id)
		if err != nil {
			return err
		}
		b, err := json.Marshal(s)
		out = string(b)
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// checkConverted checks that a subnet has no bitmap records or counters left.
func (e *env) checkConverted(id string) {
	e.t.Helper()
	err := e.st.View(e.t.Context(), func(tx store.ReadTx) error {
		n, err := tx.Count(store.KindSubnet, store.Filter{ProjectID: ipamProject, ParentID: id})
		if err != nil {
			return err
		}
		rec, err := tx.Get(store.KindSubnet, id)
		if err != nil {
			return err
		}
		if n != 0 || strings.Contains(string(rec.Data), "flowlb:ipam") {
			e.t.Errorf("subnet %s after conversion: %d bitmap records, document %s", id, n, rec.Data)
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
}
