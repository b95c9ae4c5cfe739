package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	deploy "github.com/flowlb/flowlb/deploy/kubernetes"
	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/kubelet"
)

// flowlbRollouts are what `lab up --flowlb` waits for.
var flowlbRollouts = []string{"deployment/flowlb-server", "daemonset/flowlb-agent", "deployment/flowlb-kube-controller"}

// deployFlowlb applies the manifests this binary carries (overlay lab,
// or lab-ebpf for a lab on eBPF; lab-real on real nodes, with image, the
// reference of flowlb's image the nodes imported) with kubectl and waits
// for the rollouts.
func deployFlowlb(ctx context.Context, out io.Writer, l *lab.Lab, kc *kubelet.Cluster, image string) error {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		return fmt.Errorf("--flowlb needs kubectl (Debian kubernetes-client): %w", err)
	}
	dir, err := deploy.WriteTo(filepath.Join(l.KubeDir(), "manifests"))
	if err != nil {
		return err
	}
	overlay := filepath.Join(dir, "overlays", labOverlayName(l.Dataplane()))
	if kc.State.RealNodes {
		if overlay, err = realOverlay(dir, l.Dataplane(), image); err != nil {
			return err
		}
	}
	run := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kc.State.Kubeconfig}, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, b, stderr.String())
		}
		return b, nil
	}
	if _, err := run("apply", "-k", overlay); err != nil {
		return err
	}
	for _, r := range flowlbRollouts {
		if _, err := run("-n", "flowlb-system", "rollout", "status", r, "--timeout=180s"); err != nil {
			return err
		}
	}
	// The API is https with a certificate from the agents' CA, published
	// in their Secret; the lab's clients get it as a file.
	ca, err := run("-n", "flowlb-system", "get", "secret", "flowlb-agent", "-o", `jsonpath={.data.ca\.crt}`)
	if err != nil {
		return err
	}
	caPEM, err := base64.StdEncoding.DecodeString(string(ca))
	if err != nil {
		return fmt.Errorf("the API's CA in Secret flowlb-agent: %w", err)
	}
	caFile := filepath.Join(l.KubeDir(), "flowlb-api-ca.crt")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dash, err := l.StartDashboardProxy([]string{exe, "lab", "dashboard-proxy"}, "https://198.18.0.1:9876", caFile)
	if err != nil {
		return fmt.Errorf("dashboard forwarder: %w", err)
	}
	fmt.Fprintf(out, `flowlb deployed with kubectl apply -k %s
  export KUBECONFIG=%s
  kubectl -n flowlb-system get pods -o wide
  kubectl create deployment web --image=flowlb/echo --port=8080 --replicas=3
  kubectl expose deployment web --type=LoadBalancer --port=80 --target-port=8080
  kubectl get service web          # EXTERNAL-IP from 198.19.128.0/17
the flowlb API (noauth) at https://198.18.0.1:9876, its CA in %s, inside the lab:
  flowlb lab exec client -- openstack --os-auth-type none --os-endpoint https://198.18.0.1:9876 --os-cacert %s loadbalancer list
the external client (behind the router, reaches external VIPs):
  flowlb lab exec client -- curl -s http://EXTERNAL-IP/
the flowlb dashboard, in this machine's browser (forwarded from loopback):
  %s
flowlb lab down removes it all
`, overlay, kc.State.Kubeconfig, caFile, caFile, dash)
	return nil
}

// labOverlayName is the overlay of deploy/kubernetes for a lab on
// dataplane: the agents' data plane is the manifests' to say.
func labOverlayName(dataplane string) string {
	if dataplane == lab.DataplaneEBPF {
		return "lab-ebpf"
	}
	return "lab"
}

// realOverlay writes the kustomization a lab of real nodes applies: the
// lab-real overlay with flowlb's image the nodes imported, as a user
// names their own registry's.
func realOverlay(dir, dataplane, image string) (string, error) {
	if dataplane == lab.DataplaneEBPF {
		return "", fmt.Errorf("real nodes run flowlb on nftables only for now")
	}
	name, tag, ok := strings.Cut(image, ":")
	if !ok {
		return "", fmt.Errorf("image %q has no tag", image)
	}
	out := filepath.Join(dir, "lab-real-image")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../overlays/lab-real\nimages:\n  - name: flowlb\n    newName: %s\n    newTag: %s\n", name, tag)
	return out, os.WriteFile(filepath.Join(out, "kustomization.yaml"), []byte(k), 0o644)
}
