package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/echo"
	"github.com/flowlb/flowlb/internal/lab/kubelet"
	"github.com/flowlb/flowlb/internal/lab/load"
	"github.com/flowlb/flowlb/internal/lab/realkube"
	"github.com/flowlb/flowlb/internal/lab/realnode"
)

// labFlags are shared by every lab subcommand.
type labFlags struct {
	name     string
	stateDir string
}

func (f *labFlags) open() (*lab.Lab, error) { return lab.Open(f.name, f.stateDir) }

func init() {
	f := &labFlags{}
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "A multi-node cluster in network namespaces on this machine (root)",
		Long: `lab builds nodes, pods, a fabric, a router and an external client out of
network namespaces, all addressed in 198.18.0.0/15, with an echo server in
every pod. See docs/lab.md for the topology and address plan.`,
	}
	def := os.Getenv("FLOWLB_LAB")
	if def == "" {
		def = "lab"
	}
	cmd.PersistentFlags().StringVar(&f.name, "name", def, "lab name, [a-z0-9]{1,8} (env FLOWLB_LAB)")
	cmd.PersistentFlags().StringVar(&f.stateDir, "state-dir", lab.DefaultStateRoot, "directory of lab state")
	_ = cmd.PersistentFlags().MarkHidden("state-dir")
	cmd.AddCommand(labUpCmd(f), labDownCmd(f), labStatusCmd(f), labExecCmd(f),
		labAddPodCmd(f), labDelPodCmd(f), labPodCmd(f), labProcCmd(f), labPostgresCmd(f), labECMPCmd(f), labRoutesCmd(f),
		labLoadCmd(f), labEchoCmd(), labKubeletCmd(), labNodeRuntimeCmd(), labExecPodCmd(), labDemoCmd(), labDashboardProxyCmd())
	rootCmd.AddCommand(cmd)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(x, "n"))
		if err != nil {
			return nil, fmt.Errorf("bad number %q", x)
		}
		out = append(out, n)
	}
	return out, nil
}

func labUpCmd(f *labFlags) *cobra.Command {
	var o lab.Options
	var tcp, udp, httpPorts, httpsPorts string
	var verbose, kube, withFlowlb bool
	var kubeBin, nodeKind string
	c := &cobra.Command{
		Use:   "up",
		Short: "Bring a lab up: N nodes × M pods, fabric, router and client",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Ports.TCP, err = echo.ParsePorts(tcp); err != nil {
				return err
			}
			if o.Ports.UDP, err = echo.ParsePorts(udp); err != nil {
				return err
			}
			if o.Ports.HTTP, err = echo.ParsePorts(httpPorts); err != nil {
				return err
			}
			if o.Ports.HTTPS, err = echo.ParsePorts(httpsPorts); err != nil {
				return err
			}
			o.Name, o.StateRoot = f.name, f.stateDir
			if withFlowlb && !kube {
				return fmt.Errorf("--flowlb needs --kubernetes")
			}
			if nodeKind != kubeletLab && nodeKind != kubeletReal {
				return fmt.Errorf("--kubelet %q: want %s or %s", nodeKind, kubeletLab, kubeletReal)
			}
			real := nodeKind == kubeletReal
			if real && !kube {
				return fmt.Errorf("--kubelet real needs --kubernetes")
			}
			var images []string
			if kube {
				if kubeBin == "" {
					kubeBin = lab.KubeBinDir()
				}
				// Before building anything.
				if _, err := lab.KubeBinaries(kubeBin); err != nil {
					return fmt.Errorf("kubernetes: %w", err)
				}
				if real {
					img, err := realkube.TestImages()
					if err != nil {
						return fmt.Errorf("real nodes: %w", err)
					}
					images = append(images, img)
				}
			}
			if verbose {
				o.Log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			t0 := time.Now()
			l, err := lab.Up(ctx, o)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "lab %s up: %d nodes × %d pods in %s (state %s)\n",
				l.Name(), o.Nodes, o.PodsPerNode, time.Since(t0).Round(time.Millisecond), l.Dir())
			printControlPlaneHosts(cmd.OutOrStdout(), l)
			if !kube {
				return nil
			}
			var flowlbImage string
			if real && withFlowlb {
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				ref, path, err := realkube.FlowlbImage(exe, l.Dir())
				if err != nil {
					return err
				}
				flowlbImage, images = ref, append(images, path)
			}
			var kc *kubelet.Cluster
			if real {
				kc, err = realkube.Up(ctx, l, realkube.Options{Kube: lab.KubeOptions{BinDir: kubeBin}, Images: images})
			} else {
				kc, err = kubelet.Up(ctx, l, lab.KubeOptions{BinDir: kubeBin})
			}
			if err != nil {
				// The lab stays up for a look; show the control plane's
				// last words.
				kubeLogTails(cmd.ErrOrStderr(), l)
				return fmt.Errorf("kubernetes: %w (the lab stays up; flowlb lab down removes it)", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "kubernetes %s: API ready in %s, %d nodes ready in %s\nkubeconfig: %s\n",
				kc.State.Version, kc.APIReady.Round(time.Millisecond), o.Nodes, kc.NodesReady.Round(time.Millisecond), kc.State.Kubeconfig)
			if withFlowlb {
				if err := deployFlowlb(ctx, cmd.OutOrStdout(), l, kc, flowlbImage); err != nil {
					kubeLogTails(cmd.ErrOrStderr(), l)
					return fmt.Errorf("deploy flowlb: %w (the lab stays up; flowlb lab down removes it)", err)
				}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&withFlowlb, "flowlb", false, "with --kubernetes: deploy flowlb from its manifests (deploy/kubernetes, overlay lab, or lab-ebpf with --dataplane ebpf) with kubectl and wait for it: a playground")
	c.Flags().StringVar(&nodeKind, "kubelet", kubeletLab, "with --kubernetes, what runs the nodes: lab (the lab kubelet: pods as network namespaces, fast) or real (a real kubelet and containerd per node, docs/lab.md \"Real nodes\"; images from hack/test-images.sh)")
	c.Flags().BoolVar(&kube, "kubernetes", false, "also run a Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager) and the lab kubelet; binaries from hack/kube-bins.sh")
	c.Flags().StringVar(&kubeBin, "kube-bin", "", "directory of kube-apiserver and kube-controller-manager (default $FLOWLB_KUBE_BIN, else the hack/kube-bins.sh cache)")
	c.Flags().IntVar(&o.OwnerPID, "owner-pid", 0, "tie the lab to this process: once it has exited, the next test binary's lab removes the lab (tests)")
	_ = c.Flags().MarkHidden("owner-pid")
	c.Flags().IntVar(&o.Servers, "servers", 0, fmt.Sprintf("server hosts s1…sN on the fabric (198.18.0.241…), for flowlb server replicas; at most %d", lab.MaxServers))
	c.Flags().BoolVar(&o.Postgres, "postgres", false, "also run a PostgreSQL database (Debian's postgresql package) in host db, "+lab.PostgresDSN)
	c.Flags().IntVar(&o.Nodes, "nodes", 3, "number of nodes")
	c.Flags().IntVar(&o.PodsPerNode, "pods-per-node", 2, "pods on each node")
	c.Flags().IntVar(&o.Zones, "zones", lab.DefaultZones, "topology zones the nodes are dealt into, round-robin (zone-a, zone-b, ...): the Kubernetes nodes' zone labels and the agents' --zone")
	c.Flags().StringVar(&tcp, "tcp", "8080", "echo TCP ports, comma separated")
	c.Flags().StringVar(&udp, "udp", "9090", "echo UDP ports, comma separated")
	c.Flags().StringVar(&httpPorts, "http", "80", "echo HTTP ports, comma separated")
	c.Flags().StringVar(&httpsPorts, "https", "443", "echo HTTPS ports (self-signed certificate, h2 or HTTP/1.1), comma separated")
	c.Flags().BoolVar(&o.NoEcho, "no-echo", false, "start no echo servers")
	c.Flags().StringVar(&o.Dataplane, "dataplane", lab.DataplaneNftables, "the agents' data plane: nftables, or ebpf (a cgroup per node holding its processes and pods, a bpffs for pins; start node I's agent with --dataplane ebpf --cgroup /sys/fs/cgroup/unified/flb-NAME/nI --bpf-pin-dir STATE-DIR/NAME/bpf/nI/flowlb)")
	c.Flags().BoolVarP(&verbose, "verbose", "v", false, "log progress")
	return c
}

// The kinds of nodes of lab up --kubelet.
const (
	kubeletLab  = "lab"
	kubeletReal = "real"
)

// printControlPlaneHosts names the lab's server hosts and its database.
func printControlPlaneHosts(w io.Writer, l *lab.Lab) {
	if servers := l.Servers(); len(servers) > 0 {
		var names []string
		for _, h := range servers {
			names = append(names, h.Name+" "+h.Addr.String())
		}
		fmt.Fprintf(w, "server hosts: %s\n", strings.Join(names, ", "))
	}
	if db := l.Postgres(); db != nil {
		fmt.Fprintf(w, "postgres %s: %s\n", db.Version, db.DSN)
	}
}

func labDownCmd(f *labFlags) *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:   "down",
		Short: "Remove a lab (processes, namespaces, cgroups, state), also after a crash",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			names := []string{f.name}
			if all {
				names = lab.Labs(f.stateDir)
			}
			var errs []error
			for _, n := range names {
				if err := lab.Down(n, f.stateDir); err != nil {
					errs = append(errs, fmt.Errorf("lab %s: %w", n, err))
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "lab %s down\n", n)
			}
			return errors.Join(errs...)
		},
	}
	c.Flags().BoolVar(&all, "all", false, "remove every lab on this machine (every flb-* namespace)")
	return c
}

func labStatusCmd(f *labFlags) *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "status",
		Short: "Show nodes, pods, addresses and processes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := f.open()
			if err != nil {
				return err
			}
			st := l.Status()
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			st.Format(cmd.OutOrStdout())
			return nil
		},
	}
	c.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return c
}

func labExecCmd(f *labFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "exec HOST -- CMD [ARGS...]",
		Short: "Run a command in a host's namespace (HOST: nI, nI-pJ, sI, db, client, router, fabric)",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := f.open()
			if err != nil {
				return err
			}
			h, err := l.Host(args[0])
			if err != nil {
				return err
			}
			err = h.Run(cmd.Context(), os.Stdin, os.Stdout, os.Stderr, args[1:]...)
			if code, ok := lab.ExitCode(err); ok {
				os.Exit(code)
			}
			return err
		},
	}
}

func labAddPodCmd(f *labFlags) *cobra.Command {
	var node, index int
	c := &cobra.Command{
		Use:   "add-pod",
		Short: "Add a pod (with its echo server) to a node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := f.open()
			if err != nil {
				return err
			}
			h, err := l.AddPod(cmd.Context(), node, index)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", h.Name, h.Addr)
			return nil
		},
	}
	c.Flags().IntVar(&node, "node", 1, "node index")
	c.Flags().IntVar(&index, "index", 0, "pod index on the node (default: lowest free)")
	return c
}

func labDelPodCmd(f *labFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "del-pod POD...",
		Short: "Delete pods (processes and namespace)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := f.open()
			if err != nil {
				return err
			}
			for _, p := range args {
				if err := l.DelPod(p); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func labPodCmd(f *labFlags) *cobra.Command {
	c := &cobra.Command{
		Use:   "pod",
		Short: "Control pods' echo servers: stop, start, unhealthy (HTTP 500), healthy",
	}
	each := func(use, short string, fn func(*lab.Lab, context.Context, string) error) *cobra.Command {
		return &cobra.Command{
			Use:   use + " POD...",
			Short: short,
			Args:  cobra.MinimumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				l, err := f.open()
				if err != nil {
					return err
				}
				for _, p := range args {
					if err := fn(l, cmd.Context(), p); err != nil {
						return err
					}
				}
				return nil
			},
		}
	}
	c.AddCommand(
		each("stop", "Stop the echo server (connections are refused)", func(l *lab.Lab, _ context.Context, p string) error { return l.StopEcho(p) }),
		each("start", "Start the echo server", func(l *lab.Lab, ctx context.Context, p string) error { return l.StartEcho(ctx, p) }),
		each("unhealthy", "Make HTTP answer 500", func(l *lab.Lab, _ context.Context, p string) error { return l.SetHealthy(p, false) }),
		each("healthy", "Make HTTP answer 200 again", func(l *lab.Lab, _ context.Context, p string) error { return l.SetHealthy(p, true) }),
	)
	return c
}

func labProcCmd(f *labFlags) *cobra.Command {
	c := &cobra.Command{
		Use:   "proc",
		Short: "Start or stop tracked background processes in a host (e.g. an agent in a node)",
	}
	c.AddCommand(&cobra.Command{
		Use:   "start HOST NAME -- CMD [ARGS...]",
		Short: "Start CMD in HOST's namespace in the background, logged and tracked as NAME",
		Args:  cobra.MinimumNArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := f.open()
			if err != nil {
				return err
			}
			h, err := l.Host(args[0])
			if err != nil {
				return err
			}
			p, err := h.Start(args[1], args[2:])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s/%s pid %d log %s\n", p.Host, p.Name, p.PID, p.Log)
			return nil
		},
	}, &cobra.Command{
		Use:   "stop HOST NAME",
		Short: "Stop the tracked process NAME in HOST",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := f.open()
			if err != nil {
				return err
			}
			h, err := l.Host(args[0])
			if err != nil {
				return err
			}
			return h.Stop(args[1])
		},
	}, labProcKillCmd(f), &cobra.Command{
		Use:   "restart HOST NAME",
		Short: "Start the tracked process NAME in HOST again, as it was started last (after kill)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := f.open()
			if err != nil {
				return err
			}
			h, err := l.Host(args[0])
			if err != nil {
				return err
			}
			p, err := h.Restart(args[1])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s/%s pid %d log %s\n", p.Host, p.Name, p.PID, p.Log)
			return nil
		},
	})
	return c
}

func labProcKillCmd(f *labFlags) *cobra.Command {
	var signal string
	c := &cobra.Command{
		Use:   "kill HOST NAME",
		Short: "Send a signal (default KILL) to the tracked process NAME in HOST and wait until it exits; proc restart starts it again",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			sig := unix.SignalNum("SIG" + strings.TrimPrefix(strings.ToUpper(signal), "SIG"))
			if n, err := strconv.Atoi(signal); err == nil {
				sig = syscall.Signal(n)
			}
			if sig == 0 {
				return fmt.Errorf("unknown signal %q", signal)
			}
			l, err := f.open()
			if err != nil {
				return err
			}
			h, err := l.Host(args[0])
			if err != nil {
				return err
			}
			return h.Kill(args[1], sig)
		},
	}
	c.Flags().StringVarP(&signal, "signal", "s", "KILL", "signal name or number (KILL, TERM, INT, 9, ...)")
	return c
}

func labPostgresCmd(f *labFlags) *cobra.Command {
	c := &cobra.Command{
		Use:   "postgres",
		Short: "Start or stop the lab's database (lab up --postgres) on the same data",
	}
	var mode string
	stop := &cobra.Command{
		Use:   "stop",
		Short: "Shut the database down (--mode fast or immediate) and wait until it has exited",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := f.open()
			if err != nil {
				return err
			}
			return l.StopPostgres(lab.PostgresStop(mode))
		},
	}
	stop.Flags().StringVar(&mode, "mode", string(lab.PostgresFast), "fast (end sessions, checkpoint) or immediate (like a crash: recovery at the next start)")
	start := &cobra.Command{
		Use:   "start",
		Short: "Start the database (adding it to the lab if it has none) and wait until it accepts connections",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := f.open()
			if err != nil {
				return err
			}
			db, err := l.StartPostgres(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "postgres %s: %s\n", db.Version, db.DSN)
			return nil
		},
	}
	c.AddCommand(stop, start)
	return c
}

func labECMPCmd(f *labFlags) *cobra.Command {
	var nodes string
	c := &cobra.Command{
		Use:   "ecmp",
		Short: "Show or set the nodes the router sends external VIPs (198.19.128.0/17, 2001:2:0:c000::/50) to",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := f.open()
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("nodes") {
				ns, err := parseInts(nodes)
				if err != nil {
					return err
				}
				if err := l.SetNextHops(ns...); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s via nodes %v\n", lab.ExternalVIPs, l.State().NextHops)
			return nil
		},
	}
	c.Flags().StringVar(&nodes, "nodes", "", "comma-separated node indices (empty: no route)")
	return c
}

func labRoutesCmd(f *labFlags) *cobra.Command {
	var table int
	var reflect bool
	c := &cobra.Command{
		Use:   "routes",
		Short: "Show the router's routes to announced VIPs, or (--reflect) keep them in step with the nodes' announcements",
		Long: `The flowlb agents, with --announce-cidrs, keep a host route in a routing
table of their node (--announce-table, 200) for every VIP the node can
serve; a routing daemon would export it. In the lab, "routes --reflect"
plays that part: it routes every announced VIP from the router to the
nodes announcing it (ECMP), until stopped. Run it as a lab process:
  flowlb lab proc start router routes -- flowlb lab --name NAME routes --reflect
Without --reflect it prints the router's announced routes. When the
router runs FRR (the nodes' agents speak BGP, --bgp-config), it prints
FRR's view: its sessions with the nodes and its BGP routes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := f.open()
			if err != nil {
				return err
			}
			a := l.Announcements(table)
			if !reflect && l.RouterRunsBGP() {
				out, err := l.Vtysh(cmd.Context(), lab.HostRouter, "show bgp summary", "show bgp ipv4 unicast", "show bgp ipv6 unicast")
				fmt.Fprint(cmd.OutOrStdout(), out)
				return err
			}
			if reflect {
				ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
				defer stop()
				return a.Run(ctx)
			}
			rs, err := a.Routes()
			if err != nil {
				return err
			}
			for _, p := range slices.SortedFunc(maps.Keys(rs), func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) }) {
				var names []string
				for _, n := range rs[p] {
					names = append(names, lab.NodeName(n))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s via %s\n", p, strings.Join(names, ","))
			}
			return nil
		},
	}
	c.Flags().IntVar(&table, "table", lab.AnnounceTable, "the nodes' announcement table (agent --announce-table)")
	c.Flags().BoolVar(&reflect, "reflect", false, "keep the router's routes in step with the nodes' announcements until stopped")
	return c
}

func labLoadCmd(f *labFlags) *cobra.Command {
	var cfg load.Config
	var from, output string
	c := &cobra.Command{
		Use:   "load",
		Short: "Generate connections or requests from a host and report rate, errors, latency and answering pods",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := f.open()
			if err != nil {
				return err
			}
			h, err := l.Host(from)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			r, err := h.Load(ctx, cfg)
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			r.Format(cmd.OutOrStdout())
			return nil
		},
	}
	c.Flags().StringVar(&from, "from", lab.HostClient, "host to send from (nI, nI-pJ, client)")
	c.Flags().StringVar(&cfg.Target, "to", "", "target address ip:port, an IPv6 one as [ip]:port")
	c.Flags().StringVar(&cfg.Proto, "proto", "tcp", "tcp, udp or http")
	c.Flags().IntVarP(&cfg.Concurrency, "concurrency", "c", 4, "parallel workers")
	c.Flags().Float64Var(&cfg.Rate, "rate", 0, "operations per second (0: unbounded)")
	c.Flags().DurationVarP(&cfg.Duration, "duration", "d", 5*time.Second, "run time")
	c.Flags().IntVarP(&cfg.Requests, "requests", "n", 0, "stop after this many operations (0: no limit)")
	c.Flags().DurationVar(&cfg.Timeout, "timeout", time.Second, "timeout per operation")
	c.Flags().StringVar(&cfg.Path, "path", "/", "HTTP path")
	c.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	_ = c.MarkFlagRequired("to")
	return c
}

func labEchoCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "echo [--name N] [--tcp P,..] [--udp P,..] [--http P,..] [--health-file F] [--ready-file F]",
		Short:              "Run the pod echo server (started by lab up in every pod)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return echo.Main(args, cmd.ErrOrStderr())
		},
	}
}

func labExecPodCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "exec-pod [--mount SOURCE:TARGET[:ro]]... -- COMMAND...",
		Short:              "Run a container of a flowlb pod with its volumes mounted (started by the lab kubelet)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return lab.ExecPod(args)
		},
	}
}

func labKubeletCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "kubelet --lab NAME [--state-dir D] [--kubeconfig F] [--api-listen-fd N] [--zones Z]",
		Short:              "Run the lab kubelet (started by lab up --kubernetes in the fabric)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return kubelet.Main(args, cmd.ErrOrStderr())
		},
	}
}

func labNodeRuntimeCmd() *cobra.Command {
	var spec string
	c := &cobra.Command{
		Use:    "node-runtime --spec FILE",
		Short:  "Run a real node's containerd and kubelet (started by lab up --kubelet real on each node)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := realnode.ReadSpec(spec)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return realnode.Run(ctx, s, slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)))
		},
	}
	c.Flags().StringVar(&spec, "spec", "", "the node's spec (written by the lab)")
	return c
}

func labDashboardProxyCmd() *cobra.Command {
	var fd int
	var target, caFile string
	c := &cobra.Command{
		Use:    "dashboard-proxy --listen-fd N --target https://HOST:PORT --ca-file F",
		Short:  "Forward a loopback port to a flowlb server's dashboard (started in the fabric by lab demo and lab up --flowlb)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return lab.ServeDashboardProxy(ctx, fd, target, caFile)
		},
	}
	c.Flags().IntVar(&fd, "listen-fd", 3, "inherited listening socket")
	c.Flags().StringVar(&target, "target", "", "the flowlb API")
	c.Flags().StringVar(&caFile, "ca-file", "", "CA the API's certificate is from")
	return c
}

// kubeLogTails writes the last lines of the control plane's logs.
func kubeLogTails(w io.Writer, l *lab.Lab) {
	for _, p := range []string{lab.ProcEtcd, lab.ProcAPIServer, lab.ProcController, lab.ProcKubelet} {
		b, err := os.ReadFile(l.LogPath(lab.HostFabric, p))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(w, "--- %s\n%s\n", l.LogPath(lab.HostFabric, p), strings.Join(lines, "\n"))
	}
}
