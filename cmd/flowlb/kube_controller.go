package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/flowlb/flowlb/internal/kube/kubecontroller"
	"github.com/flowlb/flowlb/internal/kube/kubelb"
	"github.com/flowlb/flowlb/internal/shared/config"
	"github.com/flowlb/flowlb/internal/shared/httpserve"
)

type kubeControllerOptions struct {
	kubeconfig     string
	endpoints      []string
	caFile         string
	cloud          string
	opts           kubelb.Options
	subnets        kubelb.Subnets
	workers        int
	leaderElect    bool
	leaseNamespace string
	leaseName      string
	metrics        string
	logLevel       string
	qps            int
}

func init() { rootCmd.AddCommand(newKubeControllerCmd()) }

func newKubeControllerCmd() *cobra.Command {
	o := kubeControllerOptions{}
	cmd := &cobra.Command{
		Use:   "kube-controller",
		Short: "Serve Kubernetes Services with load balancers whose members are the pods",
		Long: `Watch Services, EndpointSlices and Nodes and keep one Octavia load balancer per
ClusterIP, NodePort and LoadBalancer Service, through any Octavia v2 API: flowlb's
(--octavia-endpoint, noauth, one URL per server replica) or a cloud's
(--os-cloud, clouds.yaml, the endpoint of Keystone's catalog).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runKubeController(cmd.Context(), o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig (default: $KUBECONFIG, else in-cluster)")
	f.StringSliceVar(&o.endpoints, "octavia-endpoint", nil, "Octavia API URLs needing no token, one per server replica, comma-separated or repeated, "+
		"e.g. http://198.18.0.1:9876,http://198.18.0.2:9876 (same path on all); a request goes to the next when one is unreachable or answers 503")
	f.StringVar(&o.caFile, "octavia-ca-file", "", "CA certificates (PEM) an https --octavia-endpoint's certificate must come from (default: the system's)")
	f.StringVar(&o.cloud, "os-cloud", "", "cloud of clouds.yaml (default: $OS_CLOUD) to authenticate with (when no --octavia-endpoint); "+
		"the API is the one load-balancer endpoint of Keystone's catalog, so server replicas must sit behind one load-balanced address (a DNS name with several addresses, or a VIP in front)")
	f.StringVar(&o.opts.Cluster, "cluster-name", "kubernetes", "name of this cluster in load balancer names and tags")
	f.StringVar(&o.opts.ClusterIPSubnet, "cluster-ip-subnet", "", "ID of the VIP subnet holding the Services' cluster IPs (required)")
	f.StringVar(&o.opts.ExternalSubnet, "external-subnet", "", "ID of the subnet LoadBalancer addresses come from, on the same network")
	f.StringVar(&o.opts.ClusterIPSubnet6, "cluster-ip-subnet6", "", "ID of the IPv6 VIP subnet holding the Services' IPv6 cluster IPs, on the same network; without it (or --cluster-ip-cidr6) IPv6 is not served")
	f.StringVar(&o.opts.ExternalSubnet6, "external-subnet6", "", "ID of the IPv6 subnet the IPv6 LoadBalancer addresses come from, on the same network")
	f.StringVar(&o.opts.FloatingNetwork, "floating-network", "", "ID or name of the network LoadBalancer Services get a floating IP from, associated with their load balancer's VIP (the cluster IP), "+
		"instead of an address from --external-subnet (the Kuryr model; annotations pick another network or opt out)")
	f.StringVar(&o.subnets.ClusterIP, "cluster-ip-cidr", "", "the Services' cluster-IP range, instead of --cluster-ip-subnet: the network flowlb-kube-<cluster-name> and its subnets are found or created through the Neutron API of --octavia-endpoint")
	f.StringVar(&o.subnets.External, "external-cidr", "", "with --cluster-ip-cidr: the LoadBalancer addresses' range, instead of --external-subnet")
	f.StringVar(&o.subnets.ClusterIP6, "cluster-ip-cidr6", "", "the Services' IPv6 cluster-IP range, instead of --cluster-ip-subnet6 (a subnet on the same network as --cluster-ip-cidr's)")
	f.StringVar(&o.subnets.External6, "external-cidr6", "", "with --cluster-ip-cidr6: the IPv6 LoadBalancer addresses' range, instead of --external-subnet6")
	f.StringVar(&o.opts.Class, "load-balancer-class", kubelb.DefaultClass, "loadBalancerClass whose external addresses are ours, besides none (unless --load-balancer-class-only); a LoadBalancer Service of another class is served as a NodePort one (cluster IP, node ports, external IPs), its ingress left to its implementation")
	f.BoolVar(&o.opts.ClassOnly, "load-balancer-class-only", false, "take only the LoadBalancer Services of --load-balancer-class: those of no class are served as NodePort ones (cluster IP, node ports, health-check node port), their load balancer and ingress left to the cluster's cloud provider "+
		"(cloud-provider-openstack's service controller; give it another --cluster-name than this controller's, since both name load balancers kube_service_<cluster>_<namespace>_<name>)")
	f.StringSliceVar(&o.opts.PodCIDRs, "pod-cidrs", nil, "pod networks besides the Nodes' spec.podCIDRs, let through when loadBalancerSourceRanges restrict a Service")
	f.DurationVar(&o.opts.AnnounceWait, "ingress-announce-wait", 30*time.Second, "write a LoadBalancer Service's external address to its status only once a node announces it (BGP or the announcement table), "+
		"at once where no node announces addresses or the address is outside every node's ranges; this long at most when the API replica asked does not see every node's announcements (replicas), then with a warning event. 0: at ACTIVE, announced or not")
	f.IntVar(&o.workers, "workers", 8, "Services reconciled at once")
	f.IntVar(&o.qps, "kube-api-qps", 100, "requests per second to the Kubernetes API (burst: twice that)")
	f.BoolVar(&o.leaderElect, "leader-elect", true, "run only while holding the Lease, so that replicas stand by")
	f.StringVar(&o.leaseNamespace, "leader-elect-namespace", "kube-system", "namespace of the Lease")
	f.StringVar(&o.leaseName, "leader-elect-name", "flowlb-kube-controller", "name of the Lease")
	f.StringVar(&o.metrics, "metrics-listen", "127.0.0.1:9879", "address of /metrics (empty: none)")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	config.Env(f, "kubeconfig", "KUBECONFIG")
	config.Env(f, "os-cloud", "OS_CLOUD")
	config.Check(f, "log-level", checkLogLevel)
	return withConfig(cmd)
}

func runKubeController(ctx context.Context, o kubeControllerOptions) error {
	log, err := newLogger(o.logLevel)
	if err != nil {
		return err
	}
	byCIDR := o.subnets.ClusterIP != "" || o.subnets.ClusterIP6 != ""
	switch {
	case byCIDR && (o.opts.ClusterIPSubnet != "" || o.opts.ExternalSubnet != "" || o.opts.ClusterIPSubnet6 != "" || o.opts.ExternalSubnet6 != ""):
		return fmt.Errorf("give subnets by ID (--cluster-ip-subnet, --external-subnet, --cluster-ip-subnet6, --external-subnet6) or by CIDR (--cluster-ip-cidr, --external-cidr, --cluster-ip-cidr6, --external-cidr6), not both")
	case byCIDR && len(o.endpoints) == 0:
		return fmt.Errorf("--cluster-ip-cidr needs --octavia-endpoint (its Neutron API); with --os-cloud give --cluster-ip-subnet")
	case o.subnets.ClusterIP == "" && o.subnets.External != "":
		return fmt.Errorf("--external-cidr needs --cluster-ip-cidr")
	case o.subnets.ClusterIP6 == "" && o.subnets.External6 != "":
		return fmt.Errorf("--external-cidr6 needs --cluster-ip-cidr6")
	case o.opts.ClusterIPSubnet6 == "" && o.opts.ExternalSubnet6 != "":
		return fmt.Errorf("--external-subnet6 needs --cluster-ip-subnet6")
	case !byCIDR && o.opts.ClusterIPSubnet == "" && o.opts.ClusterIPSubnet6 == "":
		return fmt.Errorf("--cluster-ip-subnet (or --cluster-ip-cidr, or --cluster-ip-subnet6 or --cluster-ip-cidr6 for an IPv6 cluster) is required")
	}
	if len(o.endpoints) == 0 && o.cloud == "" {
		return fmt.Errorf("give --octavia-endpoint or --os-cloud")
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rc, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	rc.UserAgent = "flowlb-kube-controller"
	// client-go's default of 5 requests/s would make finalizers, status
	// updates and events of a burst of Services queue for seconds.
	rc.QPS, rc.Burst = float32(o.qps), o.qps*2
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var roots *x509.CertPool
	if o.caFile != "" {
		b, err := os.ReadFile(o.caFile)
		if err != nil {
			return fmt.Errorf("--octavia-ca-file: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(b) {
			return fmt.Errorf("--octavia-ca-file %s: no certificate in it", o.caFile)
		}
	}
	lbClient, err := kubelb.NewClient(ctx, o.endpoints, roots, o.cloud, reg)
	if err != nil {
		return fmt.Errorf("load-balancer API client: %w", err)
	}
	// leading is the controller at work, once this replica leads: its
	// /debug/stages.
	var leading atomic.Pointer[kubecontroller.Controller]
	if o.metrics != "" {
		ln, err := net.Listen("tcp", o.metrics)
		if err != nil {
			return fmt.Errorf("metrics listener: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/debug/stages", func(w http.ResponseWriter, r *http.Request) {
			c := leading.Load()
			if c == nil {
				http.Error(w, "not the leader", http.StatusServiceUnavailable)
				return
			}
			c.StagesHandler().ServeHTTP(w, r)
		})
		srv := &http.Server{Handler: mux}
		ln = httpserve.Serve(srv, ln, metricsLimits, log)
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
	}
	netClient, err := kubelb.NewNetworkClient(lbClient, o.endpoints, o.cloud)
	switch {
	case err != nil && o.opts.FloatingNetwork != "":
		return fmt.Errorf("network API client (for --floating-network): %w", err)
	case err != nil:
		// Only Services that ask for a floating IP need one; they fail.
		log.Warn("no network API: Services asking for a floating IP will fail", "err", err)
	}
	// Subnets given as CIDRs are ensured by the leader only, so that two
	// replicas never create the network twice.
	run := func(ctx context.Context) error {
		opts := o.opts
		if byCIDR {
			// The API may not answer yet (started together): retry.
			err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
				if err := kubelb.EnsureSubnets(ctx, lbClient, o.subnets, &opts); err != nil {
					log.Warn("VIP subnets not ready, retrying", "err", err)
					return false, nil
				}
				return true, nil
			})
			if err != nil {
				return err
			}
			log.Info("VIP subnets ready", "network", kubelb.NetworkName(opts.Cluster), "cluster_ip_subnet", opts.ClusterIPSubnet, "external_subnet", opts.ExternalSubnet,
				"cluster_ip_subnet6", opts.ClusterIPSubnet6, "external_subnet6", opts.ExternalSubnet6)
		}
		c := kubecontroller.New(client, &kubelb.Octavia{Client: lbClient}, &kubelb.Neutron{Client: netClient}, opts, reg, log)
		leading.Store(c)
		return c.Run(ctx, o.workers)
	}
	if !o.leaderElect {
		return run(ctx)
	}
	host, _ := os.Hostname()
	id := fmt.Sprintf("%s_%d", host, os.Getpid())
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.leaseNamespace, Name: o.leaseName},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	runErr := make(chan error, 1)
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, ReleaseOnCancel: true,
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				log.Info("leading", "identity", id)
				runErr <- run(ctx)
			},
			OnStoppedLeading: func() { log.Info("no longer leading", "identity", id) },
			OnNewLeader:      func(l string) { log.Info("leader", "identity", l) },
		},
	})
	select {
	case err := <-runErr:
		if err != nil {
			return err
		}
	default:
	}
	if ctx.Err() != nil {
		return nil // stopped by a signal
	}
	// Leadership lost: exit, so that a restarted process stands by again
	// rather than working on a stale view.
	return fmt.Errorf("lost the lease %s/%s", o.leaseNamespace, o.leaseName)
}
