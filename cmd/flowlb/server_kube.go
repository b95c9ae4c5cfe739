package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flowlb/flowlb/internal/kube/kubesecret"
	"github.com/flowlb/flowlb/internal/server"
)

// agentSecretFiles takes the agents' CA and token from the Kubernetes
// Secrets named by ref (NAMESPACE/NAME), making them if missing, writes
// them into the data directory and points o at those files.
func agentSecretFiles(ctx context.Context, o *server.Options, ref string) error {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		return fmt.Errorf("--agent-secret %q: want NAMESPACE/NAME", ref)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return fmt.Errorf("--agent-secret: kubeconfig: %w", err)
	}
	rc.UserAgent = "flowlb-server"
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	m, err := kubesecret.Ensure(ctx, c, ns, name)
	if err != nil {
		return fmt.Errorf("--agent-secret: %w", err)
	}
	o.AgentCACert, o.AgentCAKey, o.AgentTokenFile, err = m.WriteFiles(o.DataDir)
	return err
}
