package neutron

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
)

// createSubnetOn makes a subnet of cidr on network netID, or says why not.
func (e *env) createSubnetOn(netID, cidr string) (Subnet, error) {
	var s Subnet
	err := e.update(func(tx store.Tx) (err error) {
		s, err = createSubnet(tx, subnetSpec{Subnet: Subnet{NetworkID: netID, CIDR: cidr, ProjectID: AdminProject}})
		return err
	})
	return s, err
}

// sameNetworkOverlap and otherNetworkOverlap are the exact messages.
func sameNetworkOverlap(cidr, netID string) string {
	return "Invalid input for operation: Requested subnet with cidr: " + cidr + " for network: " + netID + " overlaps with another subnet."
}

func otherNetworkOverlap(cidr, netID string) string {
	return "Invalid input for operation: Requested subnet with cidr: " + cidr + " for network: " + netID +
		" overlaps with another subnet, on another network; flowlb does not allow overlapping subnets across networks, because its data plane does not separate networks."
}

func TestSubnetsNeverOverlap(t *testing.T) {
	e := newEnv(t)
	n1, n2 := e.network(AdminProject, true), e.network(AdminProject, true)
	e.subnet(n1.ID, "10.60.0.0/24")
	e.subnet(n1.ID, "fd00:60::/64")
	cases := []struct {
		name, net, cidr string
		want            string // the refusal's message; empty: accepted
	}{
		{"same network, inside", n1.ID, "10.60.0.128/25", sameNetworkOverlap("10.60.0.128/25", n1.ID)},
		{"same network, around", n1.ID, "10.60.0.0/16", sameNetworkOverlap("10.60.0.0/16", n1.ID)},
		{"same network, equal IPv6", n1.ID, "fd00:60::/64", sameNetworkOverlap("fd00:60::/64", n1.ID)},
		{"other network, equal", n2.ID, "10.60.0.0/24", otherNetworkOverlap("10.60.0.0/24", n2.ID)},
		{"other network, inside", n2.ID, "10.60.0.64/26", otherNetworkOverlap("10.60.0.64/26", n2.ID)},
		{"other network, around", n2.ID, "10.0.0.0/8", otherNetworkOverlap("10.0.0.0/8", n2.ID)},
		{"other network, IPv6 around", n2.ID, "fd00::/16", otherNetworkOverlap("fd00::/16", n2.ID)},
		{"other network, adjacent", n2.ID, "10.60.1.0/24", ""},
		{"same network, adjacent below", n1.ID, "10.59.255.0/24", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := e.createSubnetOn(tc.net, tc.cidr)
			if tc.want == "" {
				if err != nil || s.CIDR != tc.cidr {
					t.Fatalf("got %+v %v, want the subnet", s, err)
				}
				return
			}
			var ne *Error
			if !errors.As(err, &ne) || ne.Kind != KindInvalid || ne.Type != "InvalidInput" || ne.Message != tc.want {
				t.Fatalf("got %v, want InvalidInput %q", err, tc.want)
			}
		})
	}
}

// Through the API, the refusal is Neutron's 400 with a NeutronError body,
// and the lock record the creates take is not a subnet anyone sees.
func TestHTTPOverlappingSubnetOnAnotherNetwork(t *testing.T) {
	a := newAPI(t)
	n1 := obj(a.must(admin, 201, "POST", "/v2.0/networks", `{"network": {"name": "a", "shared": true}}`), "network")["id"].(string)
	n2 := obj(a.must(admin, 201, "POST", "/v2.0/networks", `{"network": {"name": "b"}}`), "network")["id"].(string)
	a.must(admin, 201, "POST", "/v2.0/subnets", `{"subnet": {"network_id": "`+n1+`", "cidr": "198.19.0.0/17"}}`)
	out := a.must(admin, 400, "POST", "/v2.0/subnets", `{"subnet": {"network_id": "`+n2+`", "cidr": "198.19.64.0/24"}}`)
	if typ := neutronError(t, out); typ != "InvalidInput" {
		t.Fatalf("type %s", typ)
	}
	if msg := obj(out, "NeutronError")["message"]; msg != otherNetworkOverlap("198.19.64.0/24", n2) {
		t.Fatalf("message %q", msg)
	}
	if got := listedIDs(a.must(admin, 200, "GET", "/v2.0/subnets", ""), "subnets"); len(got) != 1 {
		t.Fatalf("subnets %v, want the first only", got)
	}
	if typ := neutronError(t, a.must(admin, 404, "GET", "/v2.0/subnets/"+subnetSetLockID, "")); typ != "SubnetNotFound" {
		t.Fatalf("lock record shown: %s", typ)
	}
	b := obj(a.must(admin, 200, "GET", "/v2.0/networks/"+n2, ""), "network")
	if subs := b["subnets"].([]any); len(subs) != 0 {
		t.Fatalf("refused subnet listed on its network: %v", subs)
	}
}

// Creates racing on a fresh database (the lock record not made yet), each
// on its own network with overlapping ranges: exactly one wins, the others
// are refused as overlapping on another network.
func TestRacingOverlappingSubnetsOneWins(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		const racers = 8
		nets := make([]Network, racers)
		for i := range nets {
			nets[i] = e.network(AdminProject, true)
		}
		errs := make([]error, racers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				<-start
				// /16 .. /23 inside one another: every pair overlaps.
				_, errs[i] = e.createSubnetOn(nets[i].ID, fmt.Sprintf("10.70.0.0/%d", 16+i))
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for i, err := range errs {
			var ne *Error
			switch {
			case err == nil:
				won++
			case errors.As(err, &ne) && ne.Message == otherNetworkOverlap(fmt.Sprintf("10.70.0.0/%d", 16+i), nets[i].ID):
			default:
				t.Errorf("racer %d: %v", i, err)
			}
		}
		if won != 1 {
			t.Fatalf("%d racers made their subnet, want exactly 1", won)
		}
		err := e.st.View(context.Background(), func(tx store.ReadTx) error {
			all, err := allSubnets(tx)
			if err == nil && len(all) != 1 {
				err = fmt.Errorf("%d subnets stored, want 1", len(all))
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// A create that comes while another is in flight waits for it (PostgreSQL:
// SQLite has one writer at a time), then sees its subnet and is refused.
func TestSubnetCreateWaitsForOneInFlight(t *testing.T) {
	for _, en := range storetest.Engines(t) {
		if en.Name != "postgres" {
			continue
		}
		e := &env{t: t, st: en.Store}
		n1, n2 := e.network(AdminProject, true), e.network(AdminProject, true)
		made, release, doneA := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			doneA <- e.update(func(tx store.Tx) error {
				if _, err := createSubnet(tx, subnetSpec{Subnet: Subnet{NetworkID: n1.ID, CIDR: "10.71.0.0/24", ProjectID: AdminProject}}); err != nil {
					return err
				}
				close(made)
				<-release
				return nil
			})
		}()
		select {
		case <-made:
		case err := <-doneA:
			t.Fatalf("first create: %v", err)
		}
		doneB := make(chan error, 1)
		go func() { _, err := e.createSubnetOn(n2.ID, "10.71.0.0/25"); doneB <- err }()
		waitForLockWait(t, en.DSN)
		select {
		case err := <-doneB:
			t.Fatalf("second create did not wait for the first: %v", err)
		default:
		}
		close(release)
		if err := <-doneA; err != nil {
			t.Fatal(err)
		}
		var ne *Error
		if err := <-doneB; !errors.As(err, &ne) || ne.Message != otherNetworkOverlap("10.71.0.0/25", n2.ID) {
			t.Fatalf("second create after the first committed: %v", err)
		}
	}
}

// Replicas starting together on a new database make the default network
// and subnet once; the others find them.
func TestEnsureDefaultRacing(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		const replicas = 4
		subnets := make([]Subnet, replicas)
		errs := make([]error, replicas)
		var wg sync.WaitGroup
		for i := range replicas {
			wg.Go(func() {
				_, subnets[i], errs[i] = EnsureDefault(context.Background(), e.st, "flowlb-vip", "198.19.0.0/17")
			})
		}
		wg.Wait()
		for i := range replicas {
			if errs[i] != nil || subnets[i].ID != subnets[0].ID {
				t.Fatalf("replica %d: %+v %v, want subnet %s", i, subnets[i], errs[i], subnets[0].ID)
			}
		}
	})
}

// A default external range that overlaps the VIP range is refused at
// start, saying why.
func TestEnsureDefaultRefusesOverlap(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, _, err := EnsureDefault(ctx, e.st, "flowlb-vip", "198.19.0.0/17"); err != nil {
		t.Fatal(err)
	}
	_, _, err := EnsureDefault(ctx, e.st, "flowlb-external", "198.19.0.0/16")
	if err == nil || !strings.Contains(err.Error(), "overlaps with another subnet, on another network") {
		t.Fatalf("got %v, want the overlap refusal", err)
	}
}

// Only subnets stored before overlaps were refused make an address
// possibly shared.
func TestMayBeShared(t *testing.T) {
	e := newEnv(t)
	n1, n2 := e.network(AdminProject, true), e.network(AdminProject, true)
	s := e.subnet(n1.ID, "10.72.0.0/24")
	check := func(addr string, want bool) {
		t.Helper()
		err := e.st.View(context.Background(), func(tx store.ReadTx) error {
			got, err := Allocator{}.MayBeShared(tx, addr)
			if err == nil && got != want {
				err = fmt.Errorf("MayBeShared(%s) = %v, want %v", addr, got, want)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	check("10.72.0.5", false)
	check("10.99.0.5", false)
	// An overlapping subnet as an older flowlb let it be made.
	err := e.update(func(tx store.Tx) error {
		old := subnetDoc{Subnet: s}
		old.ID, old.NetworkID, old.CIDR = "old-overlap", n2.ID, "10.72.0.0/25"
		return putSubnet(tx, old, true)
	})
	if err != nil {
		t.Fatal(err)
	}
	check("10.72.0.5", true)
	check("10.72.0.200", false)
}
