package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/node/agent"
	"github.com/flowlb/flowlb/internal/server"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// cluster is replicas of a server on one PostgreSQL database, in-process.
type cluster struct {
	// identityTTL, if set, is the replicas' node identity lifetime.
	identityTTL time.Duration
	// identityDirs keep the identities of the nodes' agents from one
	// agent to the next, as a node's disk does (a test may set a node's
	// beforehand); the servers do not enroll a name again while the
	// identity they issued for it is valid.
	identityDirs map[string]string
	// options, if set, changes each replica's options.
	options func(*server.Options)
	stops   []func()
	t       *testing.T
	dsn     string
	dir     string
	token   string
}

func newCluster(t *testing.T) *cluster {
	return &cluster{t: t, dsn: storetest.PostgresDSN(t), dir: t.TempDir()}
}

// start starts one more replica.
func (c *cluster) start(name string, ackTimeout time.Duration) *server.Server {
	c.t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("replica", name)
	}
	o := server.Options{
		Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0", Database: c.dsn, DataDir: c.dir,
		DefaultProject: "p1", AgentTokenFile: filepath.Join(c.dir, "agent-token"), VIPCIDR: "198.19.0.0/24",
		ExternalVIPCIDR: "198.19.128.0/24", AckTimeout: ackTimeout, ReplicaID: name, LeaseTTL: time.Second, IdentityTTL: c.identityTTL,
	}
	if c.options != nil {
		c.options(&o)
	}
	s, err := server.Start(context.Background(), o, log)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(s.Crash)
	b, err := os.ReadFile(filepath.Join(c.dir, "agent-token"))
	if err != nil {
		c.t.Fatal(err)
	}
	c.token = strings.TrimSpace(string(b))
	return s
}

// kernel stands for a node's data plane: it records what it holds and
// can be held back, so that an agent does not acknowledge.
type kernel struct {
	mu    sync.Mutex
	syncs int
	table map[flows.Key]flows.Service
	gate  chan struct{} // closed: open
}

func newKernel() *kernel {
	g := make(chan struct{})
	close(g)
	return &kernel{table: map[flows.Key]flows.Service{}, gate: g}
}

func (k *kernel) hold() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gate = make(chan struct{})
}

func (k *kernel) release() {
	k.mu.Lock()
	defer k.mu.Unlock()
	select {
	case <-k.gate:
	default:
		close(k.gate)
	}
}

func (k *kernel) wait(ctx context.Context) error {
	k.mu.Lock()
	g := k.gate
	k.mu.Unlock()
	select {
	case <-g:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (k *kernel) Sync(ctx context.Context, t flows.Table) error {
	if err := k.wait(ctx); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.syncs++
	k.table = map[flows.Key]flows.Service{}
	for key, s := range t.Services {
		k.table[key] = s
	}
	return nil
}

func (k *kernel) Apply(ctx context.Context, ups []flows.Service, dels []flows.Key) error {
	if err := k.wait(ctx); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, s := range ups {
		k.table[s.Key] = s
	}
	for _, key := range dels {
		delete(k.table, key)
	}
	return nil
}

// backends returns the backends the kernel holds for a VIP, sorted.
func (k *kernel) backends(vip string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for key, s := range k.table {
		if key.VIP.String() == vip {
			for _, b := range s.Backends {
				out = append(out, b.Address.String())
			}
		}
	}
	return out
}

func (k *kernel) syncCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.syncs
}

// startAgent runs an agent for node on k, connected to the given agent
// endpoints.
func (c *cluster) startAgent(node string, k *kernel, servers ...string) *agent.Agent {
	return c.startAgentWith(agent.Config{Servers: servers, Node: node, NoHealth: true}, k)
}

func (c *cluster) startAgentWith(cfg agent.Config, k *kernel) *agent.Agent {
	cfg.Token = c.token
	caPEM, err := os.ReadFile(filepath.Join(c.dir, "agent-ca.crt"))
	if err != nil {
		c.t.Fatal(err)
	}
	if cfg.Identity == nil {
		if c.identityDirs == nil {
			c.identityDirs = map[string]string{}
		}
		dir, ok := c.identityDirs[cfg.Node]
		if !ok || cfg.Node == "" {
			dir = c.t.TempDir()
			c.identityDirs[cfg.Node] = dir
		}
		if cfg.Identity, _, err = agent.LoadIdentity(dir, caPEM); err != nil {
			c.t.Fatal(err)
		}
	}
	a := agent.New(cfg, k,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	c.stops = append(c.stops, stop)
	c.t.Cleanup(stop)
	return a
}

// stopAgents stops every agent started so far.
func (c *cluster) stopAgents() {
	for _, stop := range c.stops {
		stop()
	}
}

// call makes an API request to a replica and decodes the answer into out.
func call(t *testing.T, s *server.Server, method, path string, body any, out any) int {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+s.APIAddr.String()+path, r)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

type lbAnswer struct {
	LoadBalancer struct {
		ID                 string `json:"id"`
		VIPAddress         string `json:"vip_address"`
		VIPPortID          string `json:"vip_port_id"`
		ProvisioningStatus string `json:"provisioning_status"`
		Listeners          []struct {
			ID string `json:"id"`
		} `json:"listeners"`
		Pools []struct {
			ID string `json:"id"`
		} `json:"pools"`
	} `json:"loadbalancer"`
}

// createLB creates a load balancer with one listener, one pool and the
// members, in one call, and returns its answer.
func createLB(t *testing.T, s *server.Server, name string, members ...string) lbAnswer {
	t.Helper()
	var nets struct {
		Networks []struct {
			Subnets []string `json:"subnets"`
		} `json:"networks"`
	}
	call(t, s, "GET", "/v2.0/networks?name=flowlb-vip", nil, &nets)
	if len(nets.Networks) != 1 || len(nets.Networks[0].Subnets) != 1 {
		t.Fatalf("default VIP network: %+v", nets)
	}
	var ms []map[string]any
	for _, m := range members {
		ms = append(ms, map[string]any{"address": m, "protocol_port": 8080})
	}
	body := map[string]any{"loadbalancer": map[string]any{
		"name": name, "vip_subnet_id": nets.Networks[0].Subnets[0],
		"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80,
			"default_pool": map[string]any{"name": "pool", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": ms}}},
	}}
	var out lbAnswer
	call(t, s, "POST", "/v2/lbaas/loadbalancers", body, &out)
	return out
}

func lbStatus(t *testing.T, s *server.Server, lbID string) string {
	t.Helper()
	var out lbAnswer
	call(t, s, "GET", "/v2/lbaas/loadbalancers/"+lbID, nil, &out)
	return out.LoadBalancer.ProvisioningStatus
}

func waitStatus(t *testing.T, s *server.Server, lbID, want string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	testutil.Eventually(t, within, "load balancer "+want, func() (bool, string) {
		got := lbStatus(t, s, lbID)
		return got == want, got
	})
	return time.Since(start)
}

// waitAgentSeen waits until the one agent is connected to on and every
// replica of others knows of it from the store: until then, a change made
// on another replica would not wait for it.
func waitAgentSeen(t *testing.T, on *server.Server, others ...*server.Server) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, "agent on "+on.Replica, func() (bool, string) {
		n := len(on.Hub.Agents())
		return n == 1, fmt.Sprint(n, " agents")
	})
	for _, o := range others {
		testutil.Eventually(t, 5*time.Second, o.Replica+" knows of the agent", func() (bool, string) {
			n := len(o.Hub.ClusterAgents())
			return n == 1, fmt.Sprint(n, " agents in the cluster")
		})
	}
}

// A change committed on one replica reaches an agent connected only to
// another, and turns ACTIVE when that agent has programmed it, not
// before: the replica that took the change waits for agents it does not
// serve.
func TestChangeOnOneReplicaReachesAgentOnAnother(t *testing.T) {
	c := newCluster(t)
	a := c.start("a", time.Minute)
	b := c.start("b", time.Minute)
	k := newKernel()
	c.startAgent("node-1", k, b.AgentAddr.String())
	waitAgentSeen(t, b, a)

	lb := createLB(t, a, "web", "198.18.1.1", "198.18.1.2")
	took := waitStatus(t, a, lb.LoadBalancer.ID, "ACTIVE", 5*time.Second)
	t.Logf("ACTIVE %v after the create on the other replica", took)
	if got := k.backends(lb.LoadBalancer.VIPAddress); len(got) != 2 {
		t.Fatalf("kernel behind b holds %v for %s, want 2 backends", got, lb.LoadBalancer.VIPAddress)
	}
	if got := lbStatus(t, b, lb.LoadBalancer.ID); got != "ACTIVE" {
		t.Fatalf("b reads %s", got)
	}

	// Held back, the agent does not acknowledge: the change stays
	// pending on a, whose own agents (none) are not all there is.
	k.hold()
	pool := lb.LoadBalancer.Pools[0].ID
	call(t, a, "POST", "/v2/lbaas/pools/"+pool+"/members", map[string]any{"member": map[string]any{"address": "198.18.1.3", "protocol_port": 8080}}, nil)
	time.Sleep(1500 * time.Millisecond)
	if got := lbStatus(t, a, lb.LoadBalancer.ID); got != "PENDING_UPDATE" {
		t.Fatalf("with the only agent held back, the load balancer is %s, want PENDING_UPDATE", got)
	}
	k.release()
	waitStatus(t, a, lb.LoadBalancer.ID, "ACTIVE", 5*time.Second)
	if got := k.backends(lb.LoadBalancer.VIPAddress); len(got) != 3 {
		t.Fatalf("kernel holds %v, want 3 backends", got)
	}
}

// A replica that dies with a change pending leaves it to the others: a
// survivor takes it over when the lease runs out and completes it once
// the agents have it.
func TestPendingChangeOfDeadReplicaResumed(t *testing.T) {
	c := newCluster(t)
	a := c.start("a", time.Minute)
	b := c.start("b", time.Minute)
	k := newKernel()
	c.startAgent("node-1", k, b.AgentAddr.String())
	waitAgentSeen(t, b, a)

	k.hold()
	lb := createLB(t, a, "web", "198.18.1.1")
	if got := lbStatus(t, a, lb.LoadBalancer.ID); got != "PENDING_CREATE" {
		t.Fatalf("status %s, want PENDING_CREATE", got)
	}
	a.Crash()
	k.release()
	// The lease is 1 s and survivors look every third of it.
	took := waitStatus(t, b, lb.LoadBalancer.ID, "ACTIVE", 5*time.Second)
	t.Logf("resumed and ACTIVE %v after the crash", took)
	if got := k.backends(lb.LoadBalancer.VIPAddress); len(got) != 1 {
		t.Fatalf("kernel holds %v", got)
	}
}

// An agent whose replica dies moves to another within a second and goes
// on from its revision with deltas: its kernel is not synced again.
func TestAgentMovesToAnotherReplica(t *testing.T) {
	c := newCluster(t)
	reps := map[string]*server.Server{}
	for _, name := range []string{"a", "b"} {
		reps[name] = c.start(name, time.Minute)
	}
	k := newKernel()
	ag := c.startAgent("node-1", k, reps["a"].AgentAddr.String(), reps["b"].AgentAddr.String())
	var on, other *server.Server
	testutil.Eventually(t, 5*time.Second, "agent connected", func() (bool, string) {
		for _, s := range reps {
			if len(s.Hub.Agents()) == 1 && ag.Server() == s.AgentAddr.String() {
				on = s
			}
		}
		return on != nil, ag.Server()
	})
	for _, s := range reps {
		if s != on {
			other = s
		}
	}
	lb := createLB(t, other, "web", "198.18.1.1")
	waitStatus(t, other, lb.LoadBalancer.ID, "ACTIVE", 5*time.Second)

	start := time.Now()
	on.Crash()
	testutil.Eventually(t, 2*time.Second, "agent on the survivor", func() (bool, string) {
		return ag.Server() == other.AgentAddr.String(), ag.Server()
	})
	t.Logf("agent moved in %v", time.Since(start))
	if moved := time.Since(start); moved > time.Second {
		t.Errorf("the agent took %v to move, want < 1 s", moved)
	}
	lb2 := createLB(t, other, "api", "198.18.1.2")
	waitStatus(t, other, lb2.LoadBalancer.ID, "ACTIVE", 5*time.Second)
	if got := k.backends(lb2.LoadBalancer.VIPAddress); len(got) != 1 {
		t.Fatalf("kernel holds %v for the new VIP", got)
	}
	if got := k.backends(lb.LoadBalancer.VIPAddress); len(got) != 1 {
		t.Fatalf("kernel holds %v for the old VIP", got)
	}
	if n := k.syncCount(); n != 1 {
		t.Errorf("the kernel was synced %d times, want 1 (the first connection; deltas after the move)", n)
	}
}

// operating reads a member's operating status.
func operating(t *testing.T, s *server.Server, poolID, memberID string) string {
	t.Helper()
	var out struct {
		Member struct {
			OperatingStatus string `json:"operating_status"`
		} `json:"member"`
	}
	call(t, s, "GET", "/v2/lbaas/pools/"+poolID+"/members/"+memberID, nil, &out)
	return out.Member.OperatingStatus
}

// Probing is shared over the cluster's agents: every replica assigns a
// member to the same agent, whichever replica that agent is on, and when
// the agent moves to another replica the verdicts keep coming.
func TestHealthAcrossReplicas(t *testing.T) {
	c := newCluster(t)
	a := c.start("a", 5*time.Second)
	b := c.start("b", 5*time.Second)
	member, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	go func() {
		for {
			conn, err := member.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	port := member.Addr().(*net.TCPAddr).Port
	// n1 may go to either replica; n2 stays on b.
	n1 := c.startAgentWith(agent.Config{Servers: []string{a.AgentAddr.String(), b.AgentAddr.String()}, Node: "n1"}, newKernel())
	c.startAgentWith(agent.Config{Servers: []string{b.AgentAddr.String()}, Node: "n2"}, newKernel())
	testutil.Eventually(t, 5*time.Second, "two agents in the cluster", func() (bool, string) {
		n := len(a.Hub.Agents()) + len(b.Hub.Agents())
		return n == 2, fmt.Sprint(n)
	})

	lb := createLB(t, a, "web")
	waitStatus(t, a, lb.LoadBalancer.ID, "ACTIVE", 5*time.Second)
	pool := lb.LoadBalancer.Pools[0].ID
	var m struct {
		Member struct {
			ID string `json:"id"`
		} `json:"member"`
	}
	call(t, a, "POST", "/v2/lbaas/pools/"+pool+"/members", map[string]any{"member": map[string]any{"address": "198.18.1.1", "protocol_port": 8080,
		// Probed on loopback: the test's listener stands for the member.
		"monitor_address": "127.0.0.1", "monitor_port": port}}, &m)
	waitStatus(t, a, lb.LoadBalancer.ID, "ACTIVE", 5*time.Second)
	call(t, b, "POST", "/v2/lbaas/healthmonitors", map[string]any{"healthmonitor": map[string]any{"pool_id": pool, "type": "TCP", "delay": 1, "timeout": 1, "max_retries": 1}}, nil)
	waitStatus(t, b, lb.LoadBalancer.ID, "ACTIVE", 5*time.Second)
	testutil.Eventually(t, 10*time.Second, "member ONLINE", func() (bool, string) {
		got := operating(t, a, pool, m.Member.ID)
		return got == "ONLINE", got
	})
	testutil.Eventually(t, 5*time.Second, "both replicas assign the member to one agent", func() (bool, string) {
		pa, pb := a.Hub.Probers()[m.Member.ID], b.Hub.Probers()[m.Member.ID]
		return pa != "" && pa == pb, pa + " / " + pb
	})

	// n1's replica dies: n1 moves, and the probing goes on.
	on, other := a, b
	if n1.Server() == b.AgentAddr.String() {
		on, other = b, a
	}
	on.Crash()
	testutil.Eventually(t, 2*time.Second, "n1 on the survivor", func() (bool, string) {
		return n1.Server() == other.AgentAddr.String(), n1.Server()
	})
	member.Close()
	testutil.Eventually(t, 10*time.Second, "member ERROR", func() (bool, string) {
		got := operating(t, other, pool, m.Member.ID)
		return got == "ERROR", got
	})
}

// A replica restarted under the same id (a fixed --replica-id) within its
// lease is a new life: what the earlier life left pending is taken over
// and completed, though the id's lease never ran out. (Before Register
// retired the earlier life, such a change stayed PENDING_CREATE for good.)
func TestRestartUnderSameIDResumesPending(t *testing.T) {
	c := newCluster(t)
	a := c.start("a", time.Minute)
	b := c.start("b", time.Minute)
	k := newKernel()
	c.startAgent("node-1", k, b.AgentAddr.String())
	waitAgentSeen(t, b, a)

	k.hold()
	lb := createLB(t, a, "web", "198.18.1.1")
	a.Crash()
	again := c.start("a", time.Minute)
	k.release()
	took := waitStatus(t, again, lb.LoadBalancer.ID, "ACTIVE", 5*time.Second)
	t.Logf("ACTIVE %v after the restart under the same id", took)
	if got := k.backends(lb.LoadBalancer.VIPAddress); len(got) != 1 {
		t.Fatalf("kernel holds %v", got)
	}
}
