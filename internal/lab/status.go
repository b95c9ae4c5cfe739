package lab

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/flowlb/flowlb/internal/lab/load"
)

// Load runs a load generator from inside the host's namespace (see
// package load); cfg.Enter and cfg.Control are set by this method.
func (h Host) Load(ctx context.Context, cfg load.Config) (load.Result, error) {
	ns := h.NS
	cfg.Enter = func() (func() bool, error) { return EnterNS(ns) }
	cfg.Control = h.DialControl()
	return load.Run(ctx, cfg)
}

// Status is a lab's state as `lab status` shows it.
type Status struct {
	Name     string          `json:"name"`
	Dir      string          `json:"dir"`
	Ready    bool            `json:"ready"`
	Ports    Ports           `json:"ports"`
	NextHops []int           `json:"next_hops"`
	Kube     *KubeStatus     `json:"kubernetes,omitempty"`
	Postgres *PostgresStatus `json:"postgres,omitempty"`
	Hosts    []HostStatus    `json:"hosts"`
}

// PostgresStatus is the lab database's part of a lab's status.
type PostgresStatus struct {
	Version string `json:"version"`
	DSN     string `json:"dsn"`
	Data    string `json:"data"`
	Socket  string `json:"socket"`
	Running bool   `json:"running"`
}

// KubeStatus is the Kubernetes part of a lab's status.
type KubeStatus struct {
	Version       string `json:"version"`
	Kubeconfig    string `json:"kubeconfig"`
	Server        string `json:"server"`
	LabKubeconfig string `json:"lab_kubeconfig"`
	LabServer     string `json:"lab_server"`
	ServiceCIDR   string `json:"service_cidr"`
	ServiceCIDR6  string `json:"service_cidr6"`
	Pods          int    `json:"pods"`
}

// HostStatus is one namespace with its addresses and processes.
type HostStatus struct {
	Name    string       `json:"name"`
	Kind    string       `json:"kind"`
	NS      string       `json:"netns"`
	Addr    string       `json:"addr"`
	Addr6   string       `json:"addr6"`   // the IPv6 twin of Addr
	Present bool         `json:"present"` // namespace exists
	Healthy *bool        `json:"healthy,omitempty"`
	KubePod string       `json:"kube_pod,omitempty"` // namespace/name of the Kubernetes pod it runs
	Procs   []ProcStatus `json:"procs,omitempty"`
}

// ProcStatus is one tracked process.
type ProcStatus struct {
	Name    string `json:"name"`
	PID     int    `json:"pid"`
	Running bool   `json:"running"`
	Log     string `json:"log"`
}

// Status reports the lab's hosts, addresses and processes.
func (l *Lab) Status() Status {
	// The file, not the memory: other processes (the CLI, the lab
	// kubelet) add pods and processes too.
	s := l.snapshot()
	if fs, err := readState(l.dir); err == nil {
		s = fs
	}
	st := Status{Name: l.name, Dir: l.dir, Ready: s.Ready, Ports: s.Ports, NextHops: s.NextHops}
	if k := s.Kube; k != nil {
		st.Kube = &KubeStatus{Version: k.Version, Kubeconfig: k.Kubeconfig, Server: k.Server,
			LabKubeconfig: k.LabKubeconfig, LabServer: k.LabServer, ServiceCIDR: k.ServiceCIDR, ServiceCIDR6: k.ServiceCIDR6, Pods: len(k.Pods)}
	}
	if p := s.Postgres; p != nil {
		st.Postgres = &PostgresStatus{Version: p.Version, DSN: p.DSN, Data: p.Data, Socket: p.Socket, Running: l.PostgresRunning()}
	}
	add := func(name, kind, addr, addr6 string) {
		hs := HostStatus{Name: name, Kind: kind, NS: NSName(l.name, name), Addr: addr, Addr6: addr6, Present: nsExists(NSName(l.name, name))}
		if kind == KindPod {
			ok := l.Healthy(name)
			hs.Healthy = &ok
			if s.Kube != nil {
				if kp, found := s.Kube.Pods[name]; found {
					hs.KubePod = kp.Namespace + "/" + kp.Name
				}
			}
		}
		for _, p := range s.Procs {
			if p.Host == name {
				hs.Procs = append(hs.Procs, ProcStatus{Name: p.Name, PID: p.PID, Running: p.alive(), Log: p.Log})
			}
		}
		st.Hosts = append(st.Hosts, hs)
	}
	add(HostFabric, HostFabric, ControlAddr.String()+"/24 (control)", ControlAddr6.String()+"/64 (control)")
	add(HostRouter, HostRouter, RouterFabricAddr.String()+", "+RouterClientAddr.String(), RouterFabricAddr6.String()+", "+RouterClientAddr6.String())
	add(HostClient, HostClient, ClientAddr.String(), ClientAddr6.String())
	for _, k := range s.Servers {
		add(ServerName(k), KindServer, ServerAddr(k).String(), ServerAddr6(k).String())
	}
	if s.Postgres != nil {
		add(HostDB, HostDB, DBAddr.String()+":"+strconv.Itoa(PostgresPort), DBAddr6.String())
	}
	for _, n := range s.Nodes {
		add(NodeName(n.Index), KindNode, NodeAddr(n.Index).String()+" pods "+PodCIDR(n.Index).String(),
			NodeAddr6(n.Index).String()+" pods "+PodCIDR6(n.Index).String())
		for _, j := range n.Pods {
			add(PodName(n.Index, j), KindPod, PodAddr(n.Index, j).String(), PodAddr6(n.Index, j).String())
		}
	}
	return st
}

// Format writes the status as a table.
func (st Status) Format(w io.Writer) {
	ready := "ready"
	if !st.Ready {
		ready = "NOT READY (building, or lab up crashed: run lab down)"
	}
	fmt.Fprintf(w, "lab %s: %s; state %s\n", st.Name, ready, st.Dir)
	fmt.Fprintf(w, "echo ports: tcp %v udp %v http %v proxy-http %v https %v; external VIPs %s and %s via nodes %v\n", st.Ports.TCP, st.Ports.UDP, st.Ports.HTTP, st.Ports.ProxyHTTP, st.Ports.HTTPS, ExternalVIPs, ExternalVIPs6, st.NextHops)
	if k := st.Kube; k != nil {
		fmt.Fprintf(w, "kubernetes %s: kubeconfig %s (server %s)\n", k.Version, k.Kubeconfig, k.Server)
		fmt.Fprintf(w, "  from lab namespaces: kubeconfig %s (server %s); service CIDRs %s, %s; %d pods\n", k.LabKubeconfig, k.LabServer, k.ServiceCIDR, k.ServiceCIDR6, k.Pods)
	}
	if p := st.Postgres; p != nil {
		state := "running"
		if !p.Running {
			state = "STOPPED"
		}
		fmt.Fprintf(w, "postgres %s (%s): dsn %s\n  data %s, socket %s\n", p.Version, state, p.DSN, p.Data, p.Socket)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tNETNS\tADDRESS\tPROCESSES")
	for _, h := range st.Hosts {
		var procs []string
		for _, p := range h.Procs {
			state := "running"
			if !p.Running {
				state = "dead"
			}
			procs = append(procs, fmt.Sprintf("%s[%d %s]", p.Name, p.PID, state))
		}
		if h.Healthy != nil && !*h.Healthy {
			procs = append(procs, "(unhealthy)")
		}
		if h.KubePod != "" {
			procs = append(procs, "pod "+h.KubePod)
		}
		ns := h.NS
		if !h.Present {
			ns += " (MISSING)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", h.Name, ns, h.Addr, strings.Join(procs, " "))
	}
	tw.Flush()
}

// Counts summarises a status: namespaces present and processes running.
func (st Status) Counts() (present, running int) {
	for _, h := range st.Hosts {
		if h.Present {
			present++
		}
		running += len(slices.DeleteFunc(slices.Clone(h.Procs), func(p ProcStatus) bool { return !p.Running }))
	}
	return present, running
}
