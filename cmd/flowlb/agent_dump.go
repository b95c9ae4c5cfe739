package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowlb/flowlb/internal/node"
	"github.com/flowlb/flowlb/internal/node/dataplane/ebpf"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// agentStatus reads the status of the agent whose --metrics-listen is
// addr: the kernel's, and the announcements'.
func agentStatus(ctx context.Context, addr string) (node.Status, error) {
	var s node.Status
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/status", nil)
	if err != nil {
		return s, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return s, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

func agentDumpCmd() *cobra.Command {
	var pins, agentAddr string
	cmd := &cobra.Command{
		Use:   "dump",
		Short: "Print the flows programmed in this network namespace's kernel",
		Long: `Reads the flowlb nftables table of the current network namespace (run it
on the node, or with "ip netns exec" / "flowlb lab exec NODE --") and prints
every service: VIP, protocol and port, algorithm, backends with their share
of slots, and what else applies (local-only, persistence, limits, ACLs).
With --bpf-pin-dir, prints the eBPF data plane's services maps pinned there
instead (--dataplane ebpf): each service's refusal or algorithm, its
SOURCE_IP persistence timeout if any, and its backends with their share
of slots.
First it prints what the node's agent (its /status, at --agent) says of the
kernel: whether it holds the newest revision received, whether it refuses
the agent's writes (since when, why), when the agent last checked it, and
what it repaired of other processes' changes; then what the node
announces of the VIPs (--announce-cidrs): the prefixes in the routing
table, or those its BGP speaker advertises and each BGP session's state;
then the VIPs it answers ARP and neighbour discovery for
(--l2-interface), each since when, the messages sent, and, if it lost
its server, when its lease ends.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if agentAddr != "" {
				if s, err := agentStatus(cmd.Context(), agentAddr); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "no status from the agent at %s (--agent): %v\n", agentAddr, err)
				} else {
					s.Write(cmd.OutOrStdout())
					fmt.Fprintln(cmd.OutOrStdout())
				}
			}
			if pins != "" {
				ss, err := ebpf.Dump(pins)
				if err != nil {
					return err
				}
				ebpf.WriteDump(cmd.OutOrStdout(), ss)
				return nil
			}
			dp, err := nftables.Open(-1)
			if err != nil {
				return err
			}
			nftables.WriteDump(cmd.OutOrStdout(), dp.Dump())
			return nil
		},
	}
	cmd.Flags().StringVar(&pins, "bpf-pin-dir", "", "print the eBPF maps pinned in this directory (the agent's --bpf-pin-dir) instead of the nftables table")
	cmd.Flags().StringVar(&agentAddr, "agent", "127.0.0.1:9878", "the agent's --metrics-listen, whose /status says how the kernel stands against its flows and what the node announces and answers ARP/NDP for (empty: do not ask)")
	return cmd
}

func agentTraceCmd() *cobra.Command {
	var src, dst, proto, podCIDRs, pins string
	var sport int
	var local bool
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Show what this namespace's flows do with a new connection",
		Long: `Evaluates flowlb's rules over the elements in this network namespace's
kernel for the first packet of a connection, and prints the verdict: which
backend it is sent to (or the candidates, for ROUND_ROBIN), whether it is
masqueraded, dropped or refused, and why.
With --bpf-pin-dir, reads the eBPF data plane's services maps pinned there
instead (read-only) and prints what the socket programs do with a
connect() to --dst from a socket of the agent's cgroup: refused, left to
nftables (not in the maps), or translated to a backend of the slot table,
listed with each backend's share and the SOURCE_IP persistence that may
keep a client on the backend it used. The slot is chosen by a random number
(ROUND_ROBIN), the client's network namespace (SOURCE_IP) or socket
(SOURCE_IP_PORT), not by an address, so --src is not taken there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := netip.ParseAddrPort(dst)
			if err != nil {
				return fmt.Errorf("--dst: %w", err)
			}
			p := flows.Protocol(strings.ToUpper(proto))
			if pins != "" {
				for _, f := range []string{"src", "sport", "pod-cidrs", "from-node"} {
					if cmd.Flags().Changed(f) {
						return fmt.Errorf("--%s does not apply with --bpf-pin-dir: the socket programs do not choose by the source address", f)
					}
				}
				return ebpf.Trace(cmd.OutOrStdout(), pins, flows.Key{VIP: d.Addr(), Protocol: p, Port: d.Port()})
			}
			if src == "" {
				return fmt.Errorf("--src is required (without --bpf-pin-dir)")
			}
			s, err := netip.ParseAddrPort(src)
			if err != nil {
				if a, err2 := netip.ParseAddr(src); err2 == nil {
					s = netip.AddrPortFrom(a, uint16(sport))
				} else {
					return fmt.Errorf("--src: %w", err)
				}
			}
			dp, err := nftables.Open(-1)
			if err != nil {
				return err
			}
			var nets []netip.Prefix
			if podCIDRs != "" {
				for _, c := range strings.Split(podCIDRs, ",") {
					n, err := netip.ParsePrefix(c)
					if err != nil {
						return fmt.Errorf("--pod-cidrs: %w", err)
					}
					nets = append(nets, n)
				}
			} else if nets, err = dp.PodNetworks(); err != nil {
				return err
			}
			v := dp.Trace(nftables.Packet{Src: s.Addr(), SrcPort: s.Port(), Dst: d.Addr(), DstPort: d.Port(), Protocol: p, Local: local}, nets)
			v.Write(cmd.OutOrStdout())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&src, "src", "", "client address, or address:port")
	f.IntVar(&sport, "sport", 40000, "client port, when --src has none")
	f.StringVar(&dst, "dst", "", "VIP:port")
	f.StringVar(&proto, "proto", "TCP", "TCP, UDP or SCTP")
	f.StringVar(&podCIDRs, "pod-cidrs", "", "pod networks (default: those programmed)")
	f.BoolVar(&local, "from-node", false, "the connection is opened by the node itself")
	f.StringVar(&pins, "bpf-pin-dir", "", "trace the eBPF maps pinned in this directory (the agent's --bpf-pin-dir) instead of the nftables table")
	_ = cmd.MarkFlagRequired("dst")
	return cmd
}
