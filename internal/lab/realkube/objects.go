package realkube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/ociimage"
)

// CoreDNSImage is the cluster DNS's image (hack/test-images.sh makes it).
const CoreDNSImage = "registry.k8s.io/coredns/coredns:v1.13.1"

// Corefile answers for the cluster domain and the reverse zones of the
// lab's Services and pods from the Kubernetes API, and forwards nothing:
// no query leaves the lab.
const Corefile = `.:53 {
    errors
    health :8080
    ready :8181
    kubernetes ` + lab.ClusterDomain + ` in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    prometheus :9153
    cache 30
    loop
    reload
    loadbalance
}
`

// clusterDNS is CoreDNS as clusters run it: its role to read Services,
// EndpointSlices, pods and namespaces, its Corefile, a Deployment and the
// kube-dns Service on lab.ClusterDNS, which the kubelets give every pod.
func clusterDNS() []any {
	ns := metav1.NamespaceSystem
	labels := map[string]string{"k8s-app": "kube-dns"}
	dnsPorts := []corev1.ContainerPort{{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
		{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP}, {Name: "metrics", ContainerPort: 9153, Protocol: corev1.ProtocolTCP}}
	return []any{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: ns}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:coredns"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "coredns", Namespace: ns}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: ns}, Data: map[string]string{"Corefile": Corefile}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: ns, Labels: labels},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						ServiceAccountName: "coredns",
						DNSPolicy:          corev1.DNSDefault,
						PriorityClassName:  "system-cluster-critical",
						Containers: []corev1.Container{{
							Name: "coredns", Image: CoreDNSImage, ImagePullPolicy: corev1.PullIfNotPresent,
							Args:  []string{"-conf", "/etc/coredns/Corefile"},
							Ports: dnsPorts,
							ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8181)}},
								PeriodSeconds: 2},
							LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(8080)}},
								InitialDelaySeconds: 60, PeriodSeconds: 10, FailureThreshold: 5},
							VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
						}},
						Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"}}}}},
					},
				},
			}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: ns, Labels: labels},
			Spec: corev1.ServiceSpec{
				ClusterIP: lab.ClusterDNS.String(), ClusterIPs: []string{lab.ClusterDNS.String()},
				Selector: labels,
				Ports: []corev1.ServicePort{
					{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
					{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
					{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9153)},
				},
			}},
	}
}

// ServerVolumeNode is the node whose disk holds flowlb's server's data
// (the lab overlay pins the server there).
const ServerVolumeNode = 1

// serverVolumePath is the volume's directory on that node.
const serverVolumePath = "/var/lib/flowlb-lab/server"

// serverVolume is what a cluster's administrator provides for the claim
// of flowlb's server (deploy/kubernetes, base/server.yaml): a volume on
// node n1's disk, a directory the server's user owns. The directory is
// made in the node's own /var (realnode), where the kubelet finds it.
func serverVolume(ctx context.Context, l *lab.Lab, client kubernetes.Interface) error {
	dir := filepath.Join(l.NodeDir(ServerVolumeNode), "var", "upper", serverVolumePath[len("/var/"):])
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chown(dir, ociimage.UID, ociimage.UID); err != nil {
		return err
	}
	node := lab.NodeName(ServerVolumeNode)
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "flowlb-lab-server-data"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: serverVolumePath, Type: ptr.To(corev1.HostPathDirectory)}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: "flowlb-system", Name: "flowlb-server-data"},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}},
		},
	}
	return applyAll(ctx, client, []any{pv})
}

// applyAll creates each object, leaving one that exists as it is.
func applyAll(ctx context.Context, client kubernetes.Interface, objs []any) error {
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *corev1.ServiceAccount:
			_, err = client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ConfigMap:
			_, err = client.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Service:
			_, err = client.CoreV1().Services(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.PersistentVolume:
			_, err = client.CoreV1().PersistentVolumes().Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.Deployment:
			_, err = client.AppsV1().Deployments(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = client.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		default:
			return fmt.Errorf("applyAll: %T", o)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%T: %w", o, err)
		}
	}
	return nil
}
