package scenario

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"rsc.io/script"

	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// commands are the scenario language's own commands, besides the script
// engine's (cmp, stdout, env, ...).
func (w *world) commands() map[string]script.Cmd {
	return map[string]script.Cmd{
		"node":    script.Command(script.CmdUsage{Summary: "start an agent for a node with an empty kernel", Args: "name [zone=Z] [podnets=CIDR,...] [addrs=IP,...]"}, w.cmdNode),
		"api":     script.Command(script.CmdUsage{Summary: "send an API request; stdout is the status and the body, $ID the id of the one object answered", Args: "method path [body | @file]"}, w.cmdAPI),
		"settle":  script.Command(script.CmdUsage{Summary: "wait until nothing is pending and every agent has programmed the server's revision", Args: ""}, w.cmdSettle),
		"flows":   script.Command(script.CmdUsage{Summary: "print the flow table the server sends the agents", Args: ""}, w.cmdFlows),
		"kernel":  script.Command(script.CmdUsage{Summary: "print what a node's kernel holds, as flowlb agent dump does", Args: "node"}, w.cmdKernel),
		"plans":   script.Command(script.CmdUsage{Summary: "print the transactions a node's data plane sent since the last plans, with the kernel's answers", Args: "node"}, w.cmdPlans),
		"restart": script.Command(script.CmdUsage{Summary: "restart a node's agent over the kernel it left", Args: "node"}, w.cmdRestart),
		"fail":    script.Command(script.CmdUsage{Summary: "make a node's kernel refuse its next n transactions", Args: "node n"}, w.cmdFail),
		"trace":   script.Command(script.CmdUsage{Summary: "print what a node's rules do with a connection's first packet", Args: "node src:port dst:port tcp|udp|sctp [local]"}, w.cmdTrace),
		"health":  script.Command(script.CmdUsage{Summary: "report a member's health as an agent's probes would", Args: "member-id ONLINE|ERROR"}, w.cmdHealth),
		"kube":    script.Command(script.CmdUsage{Summary: "apply Kubernetes objects (YAML files) or delete a Service, through the kube-controller's translation and plan", Args: "apply file... | delete service name"}, w.cmdKube),
	}
}

func (w *world) cmdNode(_ *script.State, args ...string) (script.WaitFunc, error) {
	if len(args) < 1 {
		return nil, script.ErrUsage
	}
	var zone string
	var podNets []netip.Prefix
	var addrs []netip.Addr
	for _, a := range args[1:] {
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "zone":
			zone = v
		case "podnets":
			for _, c := range strings.Split(v, ",") {
				p, err := netip.ParsePrefix(c)
				if err != nil {
					return nil, err
				}
				podNets = append(podNets, p)
			}
		case "addrs":
			for _, a := range strings.Split(v, ",") {
				ip, err := netip.ParseAddr(a)
				if err != nil {
					return nil, err
				}
				addrs = append(addrs, ip)
			}
		default:
			return nil, script.ErrUsage
		}
	}
	return nil, w.addNode(args[0], zone, podNets, addrs)
}

func (w *world) cmdAPI(s *script.State, args ...string) (script.WaitFunc, error) {
	if len(args) < 2 || len(args) > 3 {
		return nil, script.ErrUsage
	}
	var body string
	if len(args) == 3 {
		body = args[2]
		if name, ok := strings.CutPrefix(body, "@"); ok {
			b, err := os.ReadFile(s.Path(name))
			if err != nil {
				return nil, err
			}
			body = s.ExpandEnv(string(b), false)
		}
	}
	code, resp, err := w.call(args[0], args[1], body)
	if err != nil {
		return nil, err
	}
	if id := answeredID(resp); id != "" {
		if err := s.Setenv("ID", id); err != nil {
			return nil, err
		}
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "%d\n", code)
	if json.Indent(&out, resp, "", "  ") != nil {
		out.Write(resp)
	}
	return func(*script.State) (string, string, error) { return out.String(), "", nil }, nil
}

// answeredID is the id of the one object an answer holds (alone, or as
// the only item of a list), if any.
func answeredID(body []byte) string {
	var root map[string]json.RawMessage
	if json.Unmarshal(body, &root) != nil {
		return ""
	}
	type object struct {
		ID string `json:"id"`
	}
	var ids []string
	for _, v := range root {
		var one object
		var list []object
		switch {
		case json.Unmarshal(v, &one) == nil && one.ID != "":
			ids = append(ids, one.ID)
		case json.Unmarshal(v, &list) == nil && len(list) == 1:
			ids = append(ids, list[0].ID)
		}
	}
	if len(ids) != 1 {
		return ""
	}
	return ids[0]
}

func (w *world) cmdSettle(_ *script.State, args ...string) (script.WaitFunc, error) {
	if len(args) != 0 {
		return nil, script.ErrUsage
	}
	return nil, w.settle(10 * time.Second)
}

func (w *world) cmdFlows(_ *script.State, args ...string) (script.WaitFunc, error) {
	if len(args) != 0 {
		return nil, script.ErrUsage
	}
	lines := w.hub.Table().Lines()
	out := strings.Join(lines, "\n")
	if out != "" {
		out += "\n"
	}
	return func(*script.State) (string, string, error) { return out, "", nil }, nil
}

func (w *world) cmdKernel(_ *script.State, args ...string) (script.WaitFunc, error) {
	if len(args) != 1 {
		return nil, script.ErrUsage
	}
	n, err := w.node(args[0])
	if err != nil {
		return nil, err
	}
	out, err := n.kernel()
	return func(*script.State) (string, string, error) { return out, "", nil }, err
}

func (w *world) cmdPlans(_ *script.State, args ...string) (script.WaitFunc, error) {
	if len(args) != 1 {
		return nil, script.ErrUsage
	}
	n, err := w.node(args[0])
	if err != nil {
		return nil, err
	}
	out := strings.Join(n.takePlans(), "")
	return func(*script.State) (string, string, error) { return out, "", nil }, nil
}

func (w *world) cmdRestart(_ *script.State, args ...string) (script.WaitFunc, error) {
	if len(args) != 1 {
		return nil, script.ErrUsage
	}
	return nil, w.restart(args[0])
}

func (w *world) cmdFail(_ *script.State, args ...string) (script.WaitFunc, error) {
	if len(args) != 2 {
		return nil, script.ErrUsage
	}
	n, err := w.node(args[0])
	if err != nil {
		return nil, err
	}
	count, err := strconv.Atoi(args[1])
	if err != nil {
		return nil, err
	}
	n.conn.FailNextFlushes(count)
	return nil, nil
}

func (w *world) cmdTrace(_ *script.State, args ...string) (script.WaitFunc, error) {
	if len(args) < 4 || len(args) > 5 {
		return nil, script.ErrUsage
	}
	n, err := w.node(args[0])
	if err != nil {
		return nil, err
	}
	src, err := netip.ParseAddrPort(args[1])
	if err != nil {
		return nil, err
	}
	dst, err := netip.ParseAddrPort(args[2])
	if err != nil {
		return nil, err
	}
	p := nftables.Packet{Src: src.Addr(), SrcPort: src.Port(), Dst: dst.Addr(), DstPort: dst.Port(),
		Protocol: flows.Protocol(strings.ToUpper(args[3])), Local: len(args) == 5 && args[4] == "local"}
	dp, err := nftables.OpenWithConn(n.conn)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	dp.Trace(p, n.podNets).Write(&out)
	return func(*script.State) (string, string, error) { return out.String(), "", nil }, nil
}

func (w *world) cmdHealth(_ *script.State, args ...string) (script.WaitFunc, error) {
	if len(args) != 2 {
		return nil, script.ErrUsage
	}
	// The change reaches the hub through the log, as any other.
	_, _, err := w.svc.SetMemberHealth(w.ctx, args[0], args[1])
	return nil, err
}
