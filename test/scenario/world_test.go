package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	flowlbnode "github.com/flowlb/flowlb/internal/node"
	"github.com/flowlb/flowlb/internal/node/agent"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables/nftfake"
	"github.com/flowlb/flowlb/internal/server/fanout"
	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/neutron"
	"github.com/flowlb/flowlb/internal/server/octavia"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// world is one scenario's cluster, every part real but the kernel: the
// API (Octavia and the Neutron subset on an in-memory store), the fan-out
// hub behind the flow provider, agents connected to it over gRPC on
// loopback, and for each node an nftables data plane programming an
// in-memory kernel (nftfake).
type world struct {
	t         *testing.T
	ctx       context.Context
	svc       *lbaas.Service
	hub       *fanout.Hub
	st        *memstore.Store
	api       *httptest.Server
	agentAddr string
	token     string
	log       *slog.Logger
	// The VIP subnets: cluster (198.19.0.0/17) and external
	// (198.19.128.0/17), on one network.
	clusterSubnet, externalSubnet string

	mu    sync.Mutex
	nodes map[string]*node
	kube  *kube
}

// node is one agent and its kernel.
type node struct {
	name, zone string
	conn       *nftfake.Conn
	podNets    []netip.Prefix
	addrs      []netip.Addr // the node's addresses serving node ports
	agent      *agent.Agent
	stop       func() // stops the agent and waits for it

	mu    sync.Mutex
	plans []string // sent since the last `plans`, with the kernel's answer
}

const token = "scenario-token"

func newWorld(t *testing.T) *world {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	w := &world{t: t, ctx: ctx, log: log, token: token, nodes: map[string]*node{}}
	st := memstore.New()
	w.st = st
	network, cluster, err := neutron.EnsureDefault(ctx, st, "flowlb-vip", "198.19.0.0/17")
	if err != nil {
		t.Fatal(err)
	}
	w.clusterSubnet = cluster.ID
	provider := flow.New(nil)
	if w.svc, err = lbaas.New(st, neutron.Allocator{}, []lbaas.Provider{provider}, lbaas.Config{DefaultProvider: flow.Name}, log); err != nil {
		t.Fatal(err)
	}
	if w.hub, err = fanout.NewHub(ctx, st, fanout.StoreSource{Store: st, Security: neutron.Allocator{}}, fanout.Options{Replica: "local", Token: token, AckTimeout: 5 * time.Second, Log: log}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = w.hub.Run(ctx) }()
	provider.Realizer = w.hub
	w.hub.SetHealthSink(w.svc.SetMemberHealth)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	grpcSrv := grpc.NewServer()
	w.hub.Register(grpcSrv)
	go func() { _ = grpcSrv.Serve(ln) }()
	t.Cleanup(grpcSrv.Stop)
	w.agentAddr = ln.Addr().String()
	w.api = httptest.NewServer(identity.NoAuth("p1", octavia.New(w.svc, neutron.NewHandler(st, log), log, octavia.Config{})))
	t.Cleanup(w.api.Close)
	w.externalSubnet = w.createSubnet(network.ID, "198.19.128.0/17")
	return w
}

// createSubnet adds a subnet through the Neutron API.
func (w *world) createSubnet(networkID, cidr string) string {
	body := fmt.Sprintf(`{"subnet": {"network_id": %q, "cidr": %q, "ip_version": 4}}`, networkID, cidr)
	code, resp, err := w.call("POST", "/v2.0/subnets", body)
	if err != nil || code != http.StatusCreated {
		w.t.Fatalf("create subnet %s: %d %s %v", cidr, code, resp, err)
	}
	var out struct {
		Subnet struct{ ID string } `json:"subnet"`
	}
	if err := json.Unmarshal(resp, &out); err != nil {
		w.t.Fatal(err)
	}
	return out.Subnet.ID
}

// call sends one API request.
func (w *world) call(method, path, body string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(w.ctx, method, w.api.URL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// addNode starts an agent for a node whose kernel is a fresh fake.
func (w *world) addNode(name, zone string, podNets []netip.Prefix, addrs []netip.Addr) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.nodes[name] != nil {
		return fmt.Errorf("node %s exists", name)
	}
	n := &node{name: name, zone: zone, conn: nftfake.New(), podNets: podNets, addrs: addrs}
	if err := w.startAgent(n); err != nil {
		return err
	}
	w.nodes[name] = n
	return nil
}

// startAgent starts a node's agent on its kernel, assembled as the
// agent's binary assembles it (internal/node): on a kernel that holds a
// table already, the data plane adopts it.
func (w *world) startAgent(n *node) error {
	ctx, stop := context.WithCancel(w.ctx)
	nd, err := flowlbnode.Start(ctx, flowlbnode.Config{Servers: []string{w.agentAddr}, Token: w.token, Node: n.name, Zone: n.zone,
		PodNetworks: n.podNets, NodeAddresses: n.addrs, NoHealth: true, Kernel: n.conn, Observe: n.record}, w.log)
	if err != nil {
		stop()
		return err
	}
	n.agent = nd.Agent()
	n.stop = func() { stop(); _ = nd.Wait() }
	w.t.Cleanup(n.stop)
	return nil
}

// restart stops a node's agent and starts a new one over the same kernel,
// as a restarted flowlb agent process would.
func (w *world) restart(name string) error {
	n, err := w.node(name)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n.stop()
	return w.startAgent(n)
}

func (w *world) node(name string) (*node, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.nodes[name]
	if n == nil {
		return nil, fmt.Errorf("no node %s (start it with: node %s)", name, name)
	}
	return n, nil
}

// record keeps a plan the node's data plane sent, and its outcome.
func (n *node) record(p nftables.Plan, err error) {
	if p.Empty() {
		return
	}
	outcome := "applied"
	if err != nil {
		outcome = "refused: " + err.Error()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.plans = append(n.plans, strings.TrimRight(p.String(), "\n")+"\n# "+outcome+"\n")
}

// takePlans returns the plans recorded since the last call.
func (n *node) takePlans() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := n.plans
	n.plans = nil
	return out
}

// kernel reads the node's fake kernel back, as `flowlb agent dump` reads
// a real one.
func (n *node) kernel() (string, error) {
	dp, err := nftables.OpenWithConn(n.conn)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	nftables.WriteDump(&b, dp.Dump())
	return b.String(), nil
}

// settle waits until no load balancer is pending, the hub has followed the
// log to its head and every agent has programmed the hub's revision.
func (w *world) settle(within time.Duration) error {
	var failed error
	err := testutil.Wait(within, func() (bool, string) {
		pending, behind, err := w.unsettled()
		if err != nil {
			failed = err
			return true, ""
		}
		return len(pending)+len(behind) == 0, fmt.Sprintf("pending %v, behind %v", pending, behind)
	})
	if failed != nil {
		return failed
	}
	if err != nil {
		return fmt.Errorf("not settled: %w", err)
	}
	return nil
}

// unsettled lists the pending load balancers and the nodes behind the hub.
func (w *world) unsettled() (pending, behind []string, err error) {
	trees, err := w.svc.Trees(identity.WithCaller(w.ctx, identity.Caller{IsAdmin: true}))
	if err != nil {
		return nil, nil, err
	}
	for _, t := range trees {
		if strings.HasPrefix(t.LB.ProvisioningStatus, "PENDING_") {
			pending = append(pending, t.LB.Name+" "+t.LB.ProvisioningStatus)
		}
	}
	_, head, err := w.st.LogBounds(w.ctx)
	if err != nil {
		return nil, nil, err
	}
	rev := w.hub.Revision()
	if rev != head {
		behind = append(behind, fmt.Sprintf("hub at %d of %d", rev, head))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, n := range w.nodes {
		if _, at := n.agent.Revision(); at != rev {
			behind = append(behind, fmt.Sprintf("%s at %d of %d", name, at, rev))
		}
	}
	sort.Strings(behind)
	return pending, behind, nil
}
