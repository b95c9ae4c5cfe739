package kubelet

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/flowlb/flowlb/internal/lab"
)

// flowlbPod reports whether every container of pod is of flowlb's image
// (a pod mixing images runs the echo server, as any other pod).
func flowlbPod(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.Containers {
		if !IsFlowlbImage(c.Image) {
			return false
		}
	}
	return len(pod.Spec.Containers) > 0
}

// apiSources reads what pods refer to from the API.
type apiSources struct {
	ctx    context.Context
	client kubernetes.Interface
}

func (a apiSources) ConfigMap(ns, name string) (map[string]string, error) {
	cm, err := a.client.CoreV1().ConfigMaps(ns).Get(a.ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for k, v := range cm.Data {
		out[k] = v
	}
	for k, v := range cm.BinaryData {
		out[k] = string(v)
	}
	return out, nil
}

func (a apiSources) Secret(ns, name string) (map[string][]byte, error) {
	s, err := a.client.CoreV1().Secrets(ns).Get(a.ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return s.Data, nil
}

func (a apiSources) Token(pod *corev1.Pod, audience string, seconds int64) (string, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds,
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}
	if audience != "" {
		req.Spec.Audiences = []string{audience}
	}
	t, err := a.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(a.ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return t.Status.Token, nil
}

// podVolumeDirs are the roots of pod's volumes under the kubelet's
// VolumeDir.
func (k *Kubelet) podVolumeDirs(pod *corev1.Pod, node int) volumeDirs {
	d := volumeDirs{pod: filepath.Join(k.cfg.VolumeDir, "pods", string(pod.UID)),
		node: filepath.Join(k.cfg.VolumeDir, "nodes", lab.NodeName(node)), claims: filepath.Join(k.cfg.VolumeDir, "claims")}
	if k.cfg.HostPaths != nil {
		d.host = k.cfg.HostPaths(node)
	}
	return d
}

// startFlowlb writes the volumes of a flowlb pod running as host and
// starts its containers as processes.
func (k *Kubelet) startFlowlb(ctx context.Context, pod *corev1.Pod, node int, ip netip.Addr, host string) error {
	src := apiSources{ctx: ctx, client: k.client}
	pe := podEnv{hostIP: lab.NodeAddr(node).String(), podIP: ip.String(), apiHost: k.cfg.APIHost, apiPort: k.cfg.APIPort,
		hostIPs: strings.Join(dualStack(lab.NodeAddr(node)), ","), podIPs: strings.Join(dualStack(ip), ",")}
	vols, err := podVolumes(pod, src, pe, k.podVolumeDirs(pod, node))
	if err != nil {
		return err
	}
	for _, v := range vols {
		if err := writeVolume(v); err != nil {
			return err
		}
	}
	var procs []lab.KubeProc
	for _, c := range pod.Spec.Containers {
		env, vars, err := containerEnv(pod, c, src, pe)
		if err != nil {
			return err
		}
		argv, err := containerArgv(k.cfg.FlowlbBin, c, vars)
		if err != nil {
			return err
		}
		ms, err := containerMounts(c, vols)
		if err != nil {
			return err
		}
		var em []lab.ExecPodMount
		for _, m := range ms {
			em = append(em, lab.ExecPodMount{Source: m.source, Target: m.target, ReadOnly: m.readOnly})
		}
		procs = append(procs, lab.KubeProc{Container: c.Name, Argv: lab.ExecPodArgv(k.cfg.FlowlbBin, em, argv), Env: env})
	}
	return k.rt.StartProcs(host, procs)
}

// writeVolume makes v's directory and writes its files (content volumes
// are rewritten whole).
func writeVolume(v volume) error {
	if v.files != nil {
		if err := os.RemoveAll(v.dir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(v.dir, 0o755); err != nil {
		return err
	}
	for p, b := range v.files {
		f := filepath.Join(v.dir, filepath.Clean("/"+p))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f, b, 0o644); err != nil {
			return fmt.Errorf("volume file %s: %w", f, err)
		}
	}
	return nil
}
