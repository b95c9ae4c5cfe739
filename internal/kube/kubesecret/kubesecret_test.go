package kubesecret

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/flowlb/flowlb/internal/shared/pki"
)

// TestEnsure: the first call makes a CA and token and publishes the
// agents' part; later calls (other replicas) get the same; an agents'
// Secret that drifted is put back; a replica that lost the race to create
// reads the winner's; the files load as the server's CA.
func TestEnsure(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	m1, err := Ensure(ctx, c, "flowlb-system", "flowlb-agent")
	if err != nil {
		t.Fatal(err)
	}
	m2, err := Ensure(ctx, c, "flowlb-system", "flowlb-agent")
	if err != nil || string(m2.CACert) != string(m1.CACert) || string(m2.CAKey) != string(m1.CAKey) || m2.Token != m1.Token {
		t.Fatalf("second call: %v, or material differs", err)
	}
	agents, err := c.CoreV1().Secrets("flowlb-system").Get(ctx, "flowlb-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(agents.Data[KeyCACert]) != string(m1.CACert) || string(agents.Data[KeyToken]) != m1.Token || agents.Data[KeyCAKey] != nil {
		t.Errorf("agents' secret: %v", agents.Data)
	}

	agents.Data[KeyToken] = []byte("stale")
	if _, err := c.CoreV1().Secrets("flowlb-system").Update(ctx, agents, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(ctx, c, "flowlb-system", "flowlb-agent"); err != nil {
		t.Fatal(err)
	}
	agents, _ = c.CoreV1().Secrets("flowlb-system").Get(ctx, "flowlb-agent", metav1.GetOptions{})
	if string(agents.Data[KeyToken]) != m1.Token {
		t.Errorf("drifted token not put back: %q", agents.Data[KeyToken])
	}

	// Lost race: the Get said not found, the Create says already exists.
	other, _ := newMaterial()
	if _, err := c.CoreV1().Secrets("ns2").Create(ctx, secret("ns2", "x-ca", map[string][]byte{
		KeyCACert: other.CACert, KeyCAKey: other.CAKey, KeyToken: []byte(other.Token)}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if m, err := Ensure(ctx, c, "ns2", "x"); err != nil || m.Token != other.Token {
		t.Errorf("existing material not used: %v", err)
	}

	dir := t.TempDir()
	cert, key, token, err := m1.WriteFiles(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.LoadCA(cert, key); err != nil {
		t.Errorf("written CA does not load: %v", err)
	}
	if b, _ := os.ReadFile(token); string(b) != m1.Token+"\n" {
		t.Errorf("token file %q", b)
	}
	if st, _ := os.Stat(key); st.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v", st.Mode())
	}
}

// TestEnsureIncomplete: a CA Secret without its key is refused, not
// replaced (nodes enrolled with it would all be locked out).
func TestEnsureIncomplete(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	if _, err := c.CoreV1().Secrets("ns").Create(ctx, secret("ns", "x-ca", map[string][]byte{KeyCACert: []byte("x")}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(ctx, c, "ns", "x"); err == nil {
		t.Fatal("incomplete secret accepted")
	}
}
