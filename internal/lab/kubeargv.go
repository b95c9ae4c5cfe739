package lab

// The command lines of the lab's Kubernetes control plane.

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// etcdArgv runs a one-member etcd on the fabric's loopback with its data
// under dir.
func etcdArgv(etcd, dir string) []string {
	return []string{etcd,
		"--name", "lab", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdClientURL, "--advertise-client-urls", etcdClientURL,
		"--listen-peer-urls", etcdPeerURL, "--initial-advertise-peer-urls", etcdPeerURL,
		"--initial-cluster", "lab=" + etcdPeerURL, "--initial-cluster-state", "new",
		"--logger", "zap", "--log-level", "warn",
	}
}

// apiServerArgv serves the API on every address of the fabric (its
// loopback and the control address) with the lab's certificates.
func apiServerArgv(binDir string, pki *kubePKI) []string {
	return []string{filepath.Join(binDir, ProcAPIServer),
		"--etcd-servers", etcdClientURL,
		"--bind-address", "0.0.0.0",
		"--secure-port", strconv.Itoa(KubeAPIPort),
		"--advertise-address", ControlAddr.String(),
		// Dual-stack: a Service may ask for either family or both.
		"--service-cluster-ip-range", KubeServiceCIDR.String() + "," + KubeServiceCIDR6.String(),
		"--client-ca-file", pki.ca.certFile,
		"--tls-cert-file", pki.serving.certFile,
		"--tls-private-key-file", pki.serving.keyFile,
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", pki.sa.certFile,
		"--service-account-signing-key-file", pki.sa.keyFile,
		"--authorization-mode", "RBAC",
		"--allow-privileged=true",
		"--profiling=false",
		"--endpoint-reconciler-type", "lease",
		// Node names do not resolve (and the fabric has no DNS): reach
		// nodes by address.
		"--kubelet-preferred-address-types", "InternalIP",
	}
}

// realNodesAPIServerArgv is the API server's command line for real
// nodes: the Node authorizer before RBAC (each kubelet acts as its node
// only) and the client certificate it shows the kubelets (exec, logs,
// port-forward).
func realNodesAPIServerArgv(binDir string, pki *kubePKI) []string {
	argv := apiServerArgv(binDir, pki)
	for i, a := range argv {
		if a == "--authorization-mode" {
			argv[i+1] = "Node,RBAC"
		}
	}
	return append(argv,
		"--kubelet-client-certificate", pki.apiKubelet.certFile,
		"--kubelet-client-key", pki.apiKubelet.keyFile,
	)
}

// schedulerArgv runs kube-scheduler, which real nodes need (the lab
// kubelet places pods itself), with the kubeconfig StartKube wrote under
// dir.
func schedulerArgv(binDir, dir string) []string {
	kc := filepath.Join(dir, "scheduler.kubeconfig")
	return []string{filepath.Join(binDir, ProcScheduler),
		"--kubeconfig", kc,
		"--authentication-kubeconfig", kc,
		"--authorization-kubeconfig", kc,
		"--bind-address", "127.0.0.1",
		"--leader-elect=false",
		"--kube-api-qps", "200", "--kube-api-burst", "400",
		"--profiling=false",
	}
}

// controllerManagerArgv runs controllers (KubeControllers, or with real
// nodes RealNodeControllers) with the kubeconfig that StartKube wrote
// under dir.
func controllerManagerArgv(binDir, dir, cluster string, pki *kubePKI, controllers []string) []string {
	kcm := filepath.Join(dir, "controller-manager.kubeconfig")
	return []string{filepath.Join(binDir, ProcController),
		"--kubeconfig", kcm,
		"--authentication-kubeconfig", kcm,
		"--authorization-kubeconfig", kcm,
		// The lab has no front proxy: do not look for its request-header CA
		// in the cluster (it would complain about it every few seconds).
		"--authentication-skip-lookup",
		"--bind-address", "127.0.0.1",
		"--cluster-name", cluster,
		"--controllers", strings.Join(controllers, ","),
		"--use-service-account-credentials=true",
		"--service-account-private-key-file", pki.sa.keyFile,
		"--root-ca-file", pki.ca.certFile,
		"--leader-elect=false",
		// The default 20 requests/s makes a burst of 100 Services wait
		// seconds for their EndpointSlices; the lab is small.
		"--kube-api-qps", "200", "--kube-api-burst", "400",
		"--profiling=false",
	}
}

// KubeControllers are the kube-controller-manager controllers the lab
// runs: what Deployments, DaemonSets, Services with EndpointSlices,
// namespaces, service accounts (and the cluster CA they project) and node
// health need.
var KubeControllers = []string{
	"endpointslice-controller",
	"deployment-controller",
	"daemonset-controller",
	"replicaset-controller",
	"namespace-controller",
	"garbage-collector-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
	"root-ca-certificate-publisher-controller",
	// A claim carries a protection finalizer that only this controller
	// removes: without it, a namespace with a claim never goes.
	"persistentvolumeclaim-protection-controller",
	"node-lifecycle-controller",
}

// RealNodeControllers are the controllers of a lab of real nodes, where
// Kubernetes' own e2e tests run: those of KubeControllers and what the
// specs and real kubelets use besides (ReplicationControllers, Endpoints
// and their mirroring, Jobs, StatefulSets, the pods' garbage collection,
// the binding of the server's volume, the aggregated roles the tests'
// namespaces are given, quotas and the Service CIDRs' finalizers).
var RealNodeControllers = append(slices.Clone(KubeControllers),
	"replicationcontroller-controller",
	"endpoints-controller",
	"endpointslice-mirroring-controller",
	"job-controller",
	"statefulset-controller",
	"pod-garbage-collector-controller",
	"persistentvolume-binder-controller",
	"persistentvolume-protection-controller",
	"clusterrole-aggregation-controller",
	"resourcequota-controller",
	"service-cidr-controller",
	"ttl-controller",
	"ttl-after-finished-controller",
	"disruption-controller",
	"cronjob-controller",
)
