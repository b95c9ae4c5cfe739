package neutron

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

func apiOn(t *testing.T, e *env) *api {
	return &api{t: t, e: e, h: NewHandler(e.st, slog.New(slog.NewTextHandler(io.Discard, nil)))}
}

// refusal checks a NeutronError answer: status, type and message.
func (a *api) refusal(c identity.Caller, status int, typ, msg, method, path, body string) {
	a.t.Helper()
	code, out := a.do(c, method, path, body)
	got := neutronError(a.t, out)
	m, _ := obj(out, "NeutronError")["message"].(string)
	if code != status || got != typ || m != msg {
		a.t.Fatalf("%s %s %s:\n got %d %s %q\nwant %d %s %q", method, path, body, code, got, m, status, typ, msg)
	}
}

// fipWorld is an external network with a small subnet (pool .2–.6), an
// internal shared network, and a port of p1 on it.
type fipWorld struct {
	ext, internal, plain string
	extSubnet            string
	port, portIP         string
}

func newFIPWorld(a *api) fipWorld {
	var w fipWorld
	w.ext = obj(a.must(admin, 201, "POST", "/v2.0/networks", `{"network": {"name": "public", "router:external": true}}`), "network")["id"].(string)
	w.extSubnet = obj(a.must(admin, 201, "POST", "/v2.0/subnets", `{"subnet": {"network_id": "`+w.ext+`", "cidr": "198.19.128.0/29"}}`), "subnet")["id"].(string)
	w.internal = obj(a.must(admin, 201, "POST", "/v2.0/networks", `{"network": {"name": "internal", "shared": true}}`), "network")["id"].(string)
	a.must(admin, 201, "POST", "/v2.0/subnets", `{"subnet": {"network_id": "`+w.internal+`", "cidr": "198.19.0.0/24"}}`)
	w.plain = obj(a.must(admin, 201, "POST", "/v2.0/networks", `{"network": {"name": "plain", "shared": true}}`), "network")["id"].(string)
	port := obj(a.must(p1, 201, "POST", "/v2.0/ports", `{"port": {"network_id": "`+w.internal+`", "name": "web"}}`), "port")
	w.port = port["id"].(string)
	w.portIP = port["fixed_ips"].([]any)[0].(map[string]any)["ip_address"].(string)
	return w
}

func TestFloatingIPs(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		a := apiOn(t, e)
		w := newFIPWorld(a)
		const fips = "/v2.0/floatingips"

		// Refusals, in Neutron's words.
		a.refusal(p1, 400, "HTTPBadRequest", "Failed to parse request. Required attribute 'floating_network_id' not specified", "POST", fips, `{"floatingip": {}}`)
		a.refusal(p1, 400, "BadRequest", "Bad floatingip request: Network "+w.plain+" is not a valid external network.", "POST", fips, `{"floatingip": {"floating_network_id": "`+w.plain+`"}}`)
		a.refusal(p1, 404, "NetworkNotFound", "Network nope could not be found.", "POST", fips, `{"floatingip": {"floating_network_id": "nope"}}`)
		a.refusal(p1, 403, "PolicyNotAuthorized", "(rule:create_floatingip:floating_ip_address) is disallowed by policy", "POST", fips,
			`{"floatingip": {"floating_network_id": "`+w.ext+`", "floating_ip_address": "198.19.128.5"}}`)
		a.refusal(p1, 400, "BadRequest", "Bad floatingip request: fixed_ip_address cannot be specified without a port_id.", "POST", fips,
			`{"floatingip": {"floating_network_id": "`+w.ext+`", "fixed_ip_address": "198.19.0.2"}}`)
		a.refusal(p1, 400, "HTTPBadRequest", "Unrecognized attribute(s) 'router'", "POST", fips, `{"floatingip": {"floating_network_id": "`+w.ext+`", "router": "x"}}`)
		a.refusal(p1, 400, "BadRequest", "Bad floatingip request: Port "+w.port+" does not have fixed ip 198.19.0.99.", "POST", fips,
			`{"floatingip": {"floating_network_id": "`+w.ext+`", "port_id": "`+w.port+`", "fixed_ip_address": "198.19.0.99"}}`)
		a.refusal(p2, 404, "PortNotFound", "Port "+w.port+" could not be found.", "POST", fips,
			`{"floatingip": {"floating_network_id": "`+w.ext+`", "port_id": "`+w.port+`"}}`)
		a.refusal(p1, 404, "FloatingIPNotFound", "Floating IP nope could not be found", "GET", fips+"/nope", "")

		// Unassociated, then associated at create.
		f1 := obj(a.must(p1, 201, "POST", fips, `{"floatingip": {"floating_network_id": "`+w.ext+`", "description": "spare", "tags": ["k8s"]}}`), "floatingip")
		if f1["floating_ip_address"] != "198.19.128.2" || f1["status"] != "DOWN" || f1["port_id"] != nil || f1["fixed_ip_address"] != nil ||
			f1["router_id"] != nil || f1["port_details"] != nil || f1["project_id"] != "p1" || f1["tenant_id"] != "p1" ||
			f1["floating_network_id"] != w.ext || f1["revision_number"] != float64(1) || f1["description"] != "spare" || f1["created_at"] == "" {
			t.Fatalf("unassociated floating IP: %v", f1)
		}
		f2 := obj(a.must(p1, 201, "POST", fips, `{"floatingip": {"floating_network_id": "`+w.ext+`", "port_id": "`+w.port+`"}}`), "floatingip")
		pd, _ := f2["port_details"].(map[string]any)
		if f2["status"] != "ACTIVE" || f2["port_id"] != w.port || f2["fixed_ip_address"] != w.portIP || pd["network_id"] != w.internal || pd["name"] != "web" {
			t.Fatalf("associated floating IP: %v", f2)
		}
		id1, id2 := f1["id"].(string), f2["id"].(string)
		a.refusal(p1, 409, "FloatingIPPortAlreadyAssociated",
			fmt.Sprintf("Cannot associate floating IP 198.19.128.2 (%s) with port %s using fixed IP %s, as that fixed IP already has a floating IP on external network %s.", id1, w.port, w.portIP, w.ext),
			"PUT", fips+"/"+id1, `{"floatingip": {"port_id": "`+w.port+`"}}`)

		// Filters, as a client looks up a VIP port's floating IP.
		for q, want := range map[string][]string{
			"?port_id=" + w.port:                  {id2},
			"?floating_ip_address=198.19.128.2":   {id1},
			"?fixed_ip_address=" + w.portIP:       {id2},
			"?status=DOWN":                        {id1},
			"?status=ACTIVE&port_id=" + w.port:    {id2},
			"?floating_network_id=" + w.ext:       {id1, id2},
			"?project_id=p1":                      {id1, id2},
			"?tenant_id=p2":                       nil,
			"?tags=k8s":                           {id1},
			"?port_id=" + w.port + "&status=DOWN": nil,
			"?id=" + id1:                          {id1},
		} {
			got := listedIDs(a.must(p1, 200, "GET", fips+q, ""), "floatingips")
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Errorf("GET %s: %v, want %v", q, got, want)
			}
		}
		if f := obj(a.must(p1, 200, "GET", fips+"/"+id2+"?fields=floating_ip_address&fields=port_id", ""), "floatingip"); len(f) != 2 || f["port_id"] != w.port {
			t.Errorf("fields: %v", f)
		}

		// Isolation: p2 sees none of it, the admin all.
		if got := listedIDs(a.must(p2, 200, "GET", fips, ""), "floatingips"); len(got) != 0 {
			t.Fatalf("p2 lists p1's floating IPs: %v", got)
		}
		a.refusal(p2, 404, "FloatingIPNotFound", "Floating IP "+id1+" could not be found", "GET", fips+"/"+id1, "")
		a.refusal(p2, 404, "FloatingIPNotFound", "Floating IP "+id1+" could not be found", "PUT", fips+"/"+id1, `{"floatingip": {"port_id": null}}`)
		a.refusal(p2, 404, "FloatingIPNotFound", "Floating IP "+id1+" could not be found", "DELETE", fips+"/"+id1, "")
		if got := listedIDs(a.must(admin, 200, "GET", fips, ""), "floatingips"); len(got) != 2 {
			t.Fatalf("admin lists %v", got)
		}
		// The floating IPs' own ports are the admin's to see only.
		if got := a.must(p1, 200, "GET", "/v2.0/ports?device_owner="+DeviceOwnerFloatingIP, ""); len(got["ports"].([]any)) != 0 {
			t.Fatalf("p1 sees floating IP ports: %v", got)
		}
		own := a.must(admin, 200, "GET", "/v2.0/ports?device_owner="+DeviceOwnerFloatingIP+"&device_id="+id1, "")["ports"].([]any)
		if len(own) != 1 {
			t.Fatalf("floating IP ports: %v", own)
		}
		ownID := own[0].(map[string]any)["id"].(string)
		a.refusal(admin, 409, "ServicePortInUse", "Port "+ownID+" cannot be deleted directly via the port API: has device owner network:floatingip.", "DELETE", "/v2.0/ports/"+ownID, "")

		// Move the association from f2 to f1.
		a.refusal(p1, 400, "HTTPBadRequest", "Cannot update read-only attribute floating_ip_address", "PUT", fips+"/"+id1, `{"floatingip": {"floating_ip_address": "198.19.128.3"}}`)
		a.refusal(p1, 400, "BadRequest", "Bad floatingip request: fixed_ip_address cannot be specified without a port_id.", "PUT", fips+"/"+id1, `{"floatingip": {"fixed_ip_address": "198.19.0.2"}}`)
		f2 = obj(a.must(p1, 200, "PUT", fips+"/"+id2, `{"floatingip": {"port_id": null}}`), "floatingip")
		if f2["status"] != "DOWN" || f2["port_id"] != nil || f2["fixed_ip_address"] != nil || f2["port_details"] != nil || f2["revision_number"] != float64(2) {
			t.Fatalf("disassociated: %v", f2)
		}
		f1 = obj(a.must(p1, 200, "PUT", fips+"/"+id1, `{"floatingip": {"port_id": "`+w.port+`", "fixed_ip_address": "`+w.portIP+`", "description": "web"}}`), "floatingip")
		if f1["status"] != "ACTIVE" || f1["port_id"] != w.port || f1["description"] != "web" || f1["revision_number"] != float64(2) {
			t.Fatalf("associated by update: %v", f1)
		}

		// Addresses: a taken one, a chosen one, then none left.
		a.refusal(admin, 409, "IpAddressAlreadyAllocated", "IP address 198.19.128.2 already allocated in subnet "+w.extSubnet, "POST", fips,
			`{"floatingip": {"floating_network_id": "`+w.ext+`", "floating_ip_address": "198.19.128.2"}}`)
		f3 := obj(a.must(admin, 201, "POST", fips, `{"floatingip": {"floating_network_id": "`+w.ext+`", "floating_ip_address": "198.19.128.6", "project_id": "p2"}}`), "floatingip")
		if f3["floating_ip_address"] != "198.19.128.6" || f3["project_id"] != "p2" {
			t.Fatalf("chosen address: %v", f3)
		}
		a.must(p1, 201, "POST", fips, `{"floatingip": {"floating_network_id": "`+w.ext+`"}}`) // .4
		a.must(p1, 201, "POST", fips, `{"floatingip": {"floating_network_id": "`+w.ext+`"}}`) // .5
		a.refusal(p1, 409, "IpAddressGenerationFailure", "No more IP addresses available on network "+w.ext+".", "POST", fips, `{"floatingip": {"floating_network_id": "`+w.ext+`"}}`)
		a.refusal(admin, 409, "NetworkInUse", "Unable to complete operation on network "+w.ext+". There are one or more ports still in use on the network.", "DELETE", "/v2.0/networks/"+w.ext, "")

		// Deleting the port disassociates its floating IP; deleting a
		// floating IP frees its address.
		a.must(p1, 204, "DELETE", "/v2.0/ports/"+w.port, "")
		f1 = obj(a.must(p1, 200, "GET", fips+"/"+id1, ""), "floatingip")
		if f1["status"] != "DOWN" || f1["port_id"] != nil || f1["revision_number"] != float64(3) {
			t.Fatalf("floating IP of a deleted port: %v", f1)
		}
		a.must(p1, 204, "DELETE", fips+"/"+id2, "")
		a.refusal(p1, 404, "FloatingIPNotFound", "Floating IP "+id2+" could not be found", "GET", fips+"/"+id2, "")
		f4 := obj(a.must(p1, 201, "POST", fips, `{"floatingip": {"floating_network_id": "`+w.ext+`"}}`), "floatingip")
		if f4["floating_ip_address"] != f2["floating_ip_address"] {
			t.Fatalf("freed address %v not given again: %v", f2["floating_ip_address"], f4)
		}
	})
}

// A port with several IPv4 addresses needs fixed_ip_address; one without
// any cannot have a floating IP.
func TestFloatingIPFixedAddressChoice(t *testing.T) {
	a := newAPI(t)
	w := newFIPWorld(a)
	sub6 := obj(a.must(admin, 201, "POST", "/v2.0/subnets", `{"subnet": {"network_id": "`+w.plain+`", "cidr": "2001:2:0:1::/64"}}`), "subnet")
	sub4 := obj(a.must(admin, 201, "POST", "/v2.0/subnets", `{"subnet": {"network_id": "`+w.plain+`", "cidr": "198.18.99.0/24"}}`), "subnet")
	only6 := obj(a.must(p1, 201, "POST", "/v2.0/ports", `{"port": {"network_id": "`+w.plain+`", "fixed_ips": [{"subnet_id": "`+sub6["id"].(string)+`"}]}}`), "port")["id"].(string)
	two4 := obj(a.must(p1, 201, "POST", "/v2.0/ports", `{"port": {"network_id": "`+w.plain+`", "fixed_ips": [{"subnet_id": "`+sub4["id"].(string)+`"}, {"subnet_id": "`+sub4["id"].(string)+`"}]}}`), "port")["id"].(string)
	body := func(port, extra string) string {
		return `{"floatingip": {"floating_network_id": "` + w.ext + `", "port_id": "` + port + `"` + extra + `}}`
	}
	a.refusal(p1, 400, "BadRequest", "Bad floatingip request: Cannot add floating IP to port "+only6+" that has no fixed IPv4 addresses.", "POST", "/v2.0/floatingips", body(only6, ""))
	a.refusal(p1, 400, "BadRequest", "Bad floatingip request: Cannot process floating IP association with 2001:2:0:1::2, since that is not an IPv4 address.", "POST", "/v2.0/floatingips", body(only6, `, "fixed_ip_address": "2001:2:0:1::2"`))
	a.refusal(p1, 400, "BadRequest", "Bad floatingip request: Port "+two4+" has multiple fixed IPv4 addresses.  Must provide a specific IPv4 address when assigning a floating IP.", "POST", "/v2.0/floatingips", body(two4, ""))
	f := obj(a.must(p1, 201, "POST", "/v2.0/floatingips", body(two4, `, "fixed_ip_address": "198.18.99.3"`)), "floatingip")
	if f["fixed_ip_address"] != "198.18.99.3" {
		t.Fatalf("floating IP: %v", f)
	}
	// The refused creates left no address behind.
	if f["floating_ip_address"] != "198.19.128.2" {
		t.Fatalf("refused creates used addresses: %v", f)
	}
	// A network with IPv6 subnets only has no floating IPs to give.
	v6 := obj(a.must(admin, 201, "POST", "/v2.0/networks", `{"network": {"name": "v6", "router:external": true}}`), "network")["id"].(string)
	a.must(admin, 201, "POST", "/v2.0/subnets", `{"subnet": {"network_id": "`+v6+`", "cidr": "2001:2:0:2::/64"}}`)
	a.refusal(p1, 400, "BadRequest", "Bad floatingip request: Network "+v6+" does not contain any IPv4 subnet.", "POST", "/v2.0/floatingips", `{"floatingip": {"floating_network_id": "`+v6+`"}}`)
}

// A floating IP on a load balancer's VIP port is that load balancer's:
// its record says so and every change to it is a change of the load
// balancer, whichever way the port and the floating IP come and go.
func TestFloatingIPFollowsTheVIPPort(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		ext := e.network(AdminProject, false)
		if err := e.update(func(tx store.Tx) error {
			ext.RouterExternal = true
			return putNetwork(tx, ext, false)
		}); err != nil {
			t.Fatal(err)
		}
		e.subnet(ext.ID, "198.19.128.0/24")
		internal := e.network(AdminProject, true)
		sub := e.subnet(internal.ID, "198.19.0.0/24")
		c := identity.Caller{ProjectID: "p1"}
		// change runs fn and returns the load balancers its commit touched.
		change := func(fn func(tx store.Tx) error) []string {
			t.Helper()
			cm, err := e.st.Update(t.Context(), fn)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for id := range cm.Changes {
				out = append(out, id)
			}
			sort.Strings(out)
			return out
		}
		lbOf := func(fipID string) string {
			t.Helper()
			var lb string
			if err := e.st.View(t.Context(), func(tx store.ReadTx) error {
				rec, err := tx.Get(store.KindFloatingIP, fipID)
				lb = rec.LoadBalancerID
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return lb
		}

		vip, err := e.allocate(VIPRequest{ProjectID: "p1", SubnetID: sub.ID, LoadBalancerID: "lb1"})
		if err != nil {
			t.Fatal(err)
		}
		var f FloatingIP
		touched := change(func(tx store.Tx) (err error) {
			f, err = createFloatingIP(tx, processHints, c, fipCreate{FloatingNetworkID: ext.ID, PortID: &vip.PortID}, "p1")
			return err
		})
		if !slices.Equal(touched, []string{"lb1"}) || lbOf(f.ID) != "lb1" || *f.FixedIPAddress != vip.Address {
			t.Fatalf("associate with lb1's VIP port: touched %v, record's load balancer %q, %+v", touched, lbOf(f.ID), f)
		}
		touched = change(func(tx store.Tx) error {
			_, err := updateFloatingIP(tx, c, f.ID, fipUpdate{PortGiven: true})
			return err
		})
		if !slices.Equal(touched, []string{"lb1"}) || lbOf(f.ID) != "" {
			t.Fatalf("disassociate: touched %v, load balancer %q", touched, lbOf(f.ID))
		}
		change(func(tx store.Tx) error {
			_, err := updateFloatingIP(tx, c, f.ID, fipUpdate{PortGiven: true, PortID: &vip.PortID})
			return err
		})
		// The load balancer goes: its port with it, the floating IP stays.
		touched = change(func(tx store.Tx) error { return ReleaseVIP(tx, vip.PortID) })
		var got fipDoc
		if err := e.st.View(t.Context(), func(tx store.ReadTx) (err error) { got, err = getFIP(tx, f.ID); return err }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(touched, []string{"lb1"}) || lbOf(f.ID) != "" || got.PortID != nil || got.Status != "DOWN" {
			t.Fatalf("VIP released: touched %v, load balancer %q, %+v", touched, lbOf(f.ID), got)
		}

		// A user's port with a floating IP, lent to a load balancer and
		// given back.
		var p Port
		change(func(tx store.Tx) (err error) {
			n, err := getNetwork(tx, internal.ID)
			if err != nil {
				return err
			}
			p, err = createPort(tx, newAllocator(tx, processHints), n, Port{ProjectID: "p1"}, nil, false, "")
			return err
		})
		change(func(tx store.Tx) error {
			_, err := updateFloatingIP(tx, c, f.ID, fipUpdate{PortGiven: true, PortID: &p.ID})
			return err
		})
		if lbOf(f.ID) != "" {
			t.Fatal("a user's port is served by a load balancer")
		}
		touched = change(func(tx store.Tx) error {
			_, err := AllocateVIP(tx, VIPRequest{ProjectID: "p1", PortID: p.ID, LoadBalancerID: "lb2"})
			return err
		})
		if !slices.Equal(touched, []string{"lb2"}) || lbOf(f.ID) != "lb2" {
			t.Fatalf("port bound to lb2: touched %v, load balancer %q", touched, lbOf(f.ID))
		}
		touched = change(func(tx store.Tx) error { return ReleaseVIP(tx, p.ID) })
		if !slices.Equal(touched, []string{"lb2"}) || lbOf(f.ID) != "" {
			t.Fatalf("port given back: touched %v, load balancer %q", touched, lbOf(f.ID))
		}
		touched = change(func(tx store.Tx) error { return deleteFloatingIP(tx, processHints, c, f.ID) })
		if len(touched) != 0 {
			t.Fatalf("deleting a floating IP of a user's port touched %v", touched)
		}
	})
}

// Clients of several replicas create floating IPs on one external subnet
// and associate them with one port at once: every address is given once,
// and the port's address gets one floating IP.
func TestFloatingIPsConcurrently(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		a := apiOn(t, e)
		w := newFIPWorld(a) // pool .2–.6
		var mu sync.Mutex
		var addrs []string
		associated, conflicts := 0, 0
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				code, out := a.do(p1, "POST", "/v2.0/floatingips", `{"floatingip": {"floating_network_id": "`+w.ext+`"}}`)
				mu.Lock()
				defer mu.Unlock()
				if code == 201 {
					addrs = append(addrs, obj(out, "floatingip")["floating_ip_address"].(string))
				} else if neutronError(t, out) != "IpAddressGenerationFailure" {
					t.Errorf("create: %d %v", code, out)
				}
			})
		}
		wg.Wait()
		sort.Strings(addrs)
		if want := poolAddrs("198.19.128.2", "198.19.128.6"); !slices.Equal(addrs, want) {
			t.Fatalf("addresses %v, want each of %v once", addrs, want)
		}
		list := a.must(p1, 200, "GET", "/v2.0/floatingips", "")["floatingips"].([]any)
		for _, f := range list {
			id := f.(map[string]any)["id"].(string)
			wg.Go(func() {
				code, out := a.do(p1, "PUT", "/v2.0/floatingips/"+id, `{"floatingip": {"port_id": "`+w.port+`"}}`)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case code == 200:
					associated++
				case code == 409 && neutronError(t, out) == "FloatingIPPortAlreadyAssociated":
					conflicts++
				default:
					t.Errorf("associate: %d %v", code, out)
				}
			})
		}
		wg.Wait()
		if associated != 1 || conflicts != len(list)-1 {
			t.Fatalf("%d associated, %d refused, want 1 and %d", associated, conflicts, len(list)-1)
		}
		if got := a.must(p1, 200, "GET", "/v2.0/floatingips?port_id="+w.port, "")["floatingips"].([]any); len(got) != 1 {
			t.Fatalf("port has %d floating IPs", len(got))
		}
	})
}

func TestExtensions(t *testing.T) {
	a := newAPI(t)
	list := a.must(p1, 200, "GET", "/v2.0/extensions", "")["extensions"].([]any)
	var aliases []string
	for _, x := range list {
		m := x.(map[string]any)
		for _, k := range []string{"name", "alias", "description", "updated"} {
			if s, _ := m[k].(string); s == "" {
				t.Errorf("extension %v: no %s", m, k)
			}
		}
		if l, ok := m["links"].([]any); !ok || len(l) != 0 {
			t.Errorf("extension %v: links %v", m["alias"], m["links"])
		}
		aliases = append(aliases, m["alias"].(string))
	}
	for _, want := range []string{"external-net", "fip-port-details", "standard-attr-revisions", "security-group"} {
		if !slices.Contains(aliases, want) {
			t.Errorf("extensions %v lack %s", aliases, want)
		}
	}
	for _, never := range []string{"router", "qos"} {
		if slices.Contains(aliases, never) {
			t.Errorf("extensions list %s, which is not served", never)
		}
	}
	if got := obj(a.must(p1, 200, "GET", "/v2.0/extensions/external-net.json", ""), "extension"); got["name"] != "Neutron external network" {
		t.Errorf("show external-net: %v", got)
	}
	a.refusal(p1, 404, "HTTPNotFound", "Extension with alias router does not exist", "GET", "/v2.0/extensions/router", "")
	if len(list) != len(extensions) {
		t.Errorf("listed %d of %d", len(list), len(extensions))
	}
}

// heldRealizer keeps every wait for the agents until the test ends it.
type heldRealizer struct {
	mu    sync.Mutex
	waits []heldWait
}

type heldWait struct {
	lb     string
	change int64
	done   func(error)
}

func (r *heldRealizer) Realize(lb string, change int64, done func(error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = append(r.waits, heldWait{lb, change, done})
}

func (r *heldRealizer) held() []heldWait {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.waits)
}

// TestFloatingIPStatusFollowsTheAgents: with a realizer (the server's
// fan-out hub), a floating IP associated with a load balancer's VIP port
// is DOWN until the agents have programmed the load balancer's change
// that associated it, then ACTIVE; a wait that outlived its association
// changes nothing; a user's port needs no agent.
func TestFloatingIPStatusFollowsTheAgents(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		r := &heldRealizer{}
		a := &api{t: t, e: e, h: NewHandler(e.st, slog.New(slog.NewTextHandler(io.Discard, nil)), WithRealizer(r))}
		w := newFIPWorld(a)
		var sub string
		for _, s := range obj(a.must(admin, 200, "GET", "/v2.0/networks/"+w.internal, ""), "network")["subnets"].([]any) {
			sub = s.(string)
		}
		vip, err := e.allocate(VIPRequest{ProjectID: "p1", SubnetID: sub, LoadBalancerID: "lb1"})
		if err != nil {
			t.Fatal(err)
		}
		status := func(id string) (string, float64) {
			f := obj(a.must(p1, 200, "GET", "/v2.0/floatingips/"+id, ""), "floatingip")
			return f["status"].(string), f["revision_number"].(float64)
		}
		f := obj(a.must(p1, 201, "POST", "/v2.0/floatingips", `{"floatingip": {"floating_network_id": "`+w.ext+`", "port_id": "`+vip.PortID+`"}}`), "floatingip")
		id := f["id"].(string)
		if f["status"] != "DOWN" || f["port_id"] != vip.PortID {
			t.Fatalf("associated with lb1's VIP port: %v, want DOWN until the agents have it", f)
		}
		waits := r.held()
		if len(waits) != 1 || waits[0].lb != "lb1" || waits[0].change == 0 {
			t.Fatalf("waits %+v, want one for lb1's change", waits)
		}
		if st, _ := status(id); st != "DOWN" {
			t.Fatalf("before the agents: %s", st)
		}
		// A description changes nothing of the wait.
		a.must(p1, 200, "PUT", "/v2.0/floatingips/"+id, `{"floatingip": {"description": "web"}}`)
		if n := len(r.held()); n != 1 {
			t.Fatalf("a description update waits again: %d waits", n)
		}
		waits[0].done(nil)
		if st, rev := status(id); st != "ACTIVE" || rev != 3 {
			t.Fatalf("once the agents have it: %s, revision %v; want ACTIVE, 3", st, rev)
		}

		// Disassociated: DOWN at once. Associated again: a new wait; the
		// old association's wait, ending late, leaves the new one DOWN.
		a.must(p1, 200, "PUT", "/v2.0/floatingips/"+id, `{"floatingip": {"port_id": null}}`)
		if st, _ := status(id); st != "DOWN" {
			t.Fatalf("disassociated: %s", st)
		}
		a.must(p1, 200, "PUT", "/v2.0/floatingips/"+id, `{"floatingip": {"port_id": "`+vip.PortID+`"}}`)
		a.must(p1, 200, "PUT", "/v2.0/floatingips/"+id, `{"floatingip": {"port_id": null}}`)
		a.must(p1, 200, "PUT", "/v2.0/floatingips/"+id, `{"floatingip": {"port_id": "`+vip.PortID+`"}}`)
		waits = r.held()
		if len(waits) != 3 || waits[2].change <= waits[1].change {
			t.Fatalf("waits %+v, want one per association", waits)
		}
		waits[1].done(nil)
		if st, _ := status(id); st != "DOWN" {
			t.Fatalf("a wait of an earlier association made the new one %s", st)
		}
		waits[2].done(nil)
		if st, _ := status(id); st != "ACTIVE" {
			t.Fatalf("the new association's wait ended: %s", st)
		}
		// Deleted while waiting: the wait's end finds nothing to do.
		a.must(p1, 200, "PUT", "/v2.0/floatingips/"+id, `{"floatingip": {"port_id": null}}`)
		a.must(p1, 200, "PUT", "/v2.0/floatingips/"+id, `{"floatingip": {"port_id": "`+vip.PortID+`"}}`)
		a.must(p1, 204, "DELETE", "/v2.0/floatingips/"+id, "")
		r.held()[3].done(nil)

		// A user's port: nothing for the agents to program, ACTIVE at once.
		f = obj(a.must(p1, 201, "POST", "/v2.0/floatingips", `{"floatingip": {"floating_network_id": "`+w.ext+`", "port_id": "`+w.port+`"}}`), "floatingip")
		if f["status"] != "ACTIVE" || len(r.held()) != 4 {
			t.Fatalf("a user's port: %v, %d waits", f["status"], len(r.held()))
		}

		// A wait lost with its replica: the association, DOWN, is made
		// ACTIVE once older than the cutoff (an ack timeout ago), and only
		// it (an unassociated floating IP stays DOWN).
		f = obj(a.must(p1, 201, "POST", "/v2.0/floatingips", `{"floatingip": {"floating_network_id": "`+w.ext+`", "port_id": "`+vip.PortID+`"}}`), "floatingip")
		lost := f["id"].(string)
		down := obj(a.must(p1, 201, "POST", "/v2.0/floatingips", `{"floatingip": {"floating_network_id": "`+w.ext+`"}}`), "floatingip")["id"].(string)
		if n, err := ActivateOverdue(t.Context(), e.st, time.Now().Add(-time.Hour)); err != nil || n != 0 {
			t.Fatalf("an association of now is not overdue an hour ago: %d, %v", n, err)
		}
		if n, err := ActivateOverdue(t.Context(), e.st, time.Now().Add(time.Hour)); err != nil || n != 1 {
			t.Fatalf("overdue: %d made ACTIVE, %v; want 1", n, err)
		}
		if st, _ := status(lost); st != "ACTIVE" {
			t.Fatalf("the overdue association: %s", st)
		}
		if st, _ := status(down); st != "DOWN" {
			t.Fatalf("an unassociated floating IP: %s", st)
		}
	})
}
