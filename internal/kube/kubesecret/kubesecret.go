// Package kubesecret keeps the agents' CA and bootstrap token in
// Kubernetes Secrets, so that server replicas deployed by the manifests
// (deploy/kubernetes) share them and agents mount them, with no step
// before `kubectl apply`: the first replica to start makes them.
//
// Two Secrets: NAME-ca (ca.crt, ca.key, token), for the replicas only,
// is the source of truth; NAME (ca.crt, token) is what agents mount.
package kubesecret

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/flowlb/flowlb/internal/shared/pki"
)

// Keys of the Secrets.
const (
	KeyCACert = "ca.crt"
	KeyCAKey  = "ca.key"
	KeyToken  = "token"
)

// Material is the CA (certificate and key, PEM) and the token.
type Material struct {
	CACert, CAKey []byte
	Token         string
}

// Ensure returns the material of the Secrets namespace/name-ca, creating
// it on first use, and makes namespace/name (the agents' part) match it.
// Replicas starting together converge on the first one's material: a
// create that finds the Secret made by another replica reads it instead.
func Ensure(ctx context.Context, c kubernetes.Interface, namespace, name string) (Material, error) {
	secrets := c.CoreV1().Secrets(namespace)
	full, err := secrets.Get(ctx, name+"-ca", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		var m Material
		if m, err = newMaterial(); err != nil {
			return Material{}, err
		}
		full, err = secrets.Create(ctx, secret(namespace, name+"-ca", map[string][]byte{
			KeyCACert: m.CACert, KeyCAKey: m.CAKey, KeyToken: []byte(m.Token)}), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			full, err = secrets.Get(ctx, name+"-ca", metav1.GetOptions{})
		}
	}
	if err != nil {
		return Material{}, fmt.Errorf("secret %s/%s-ca: %w", namespace, name, err)
	}
	m := Material{CACert: full.Data[KeyCACert], CAKey: full.Data[KeyCAKey], Token: string(full.Data[KeyToken])}
	if len(m.CACert) == 0 || len(m.CAKey) == 0 || m.Token == "" {
		return Material{}, fmt.Errorf("secret %s/%s-ca lacks %s, %s or %s: delete it to make a new CA (every node enrolls again)", namespace, name, KeyCACert, KeyCAKey, KeyToken)
	}
	return m, publish(ctx, c, namespace, name, m)
}

// publish makes the agents' Secret hold m's certificate and token.
func publish(ctx context.Context, c kubernetes.Interface, namespace, name string, m Material) error {
	secrets := c.CoreV1().Secrets(namespace)
	want := map[string][]byte{KeyCACert: m.CACert, KeyToken: []byte(m.Token)}
	cur, err := secrets.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = secrets.Create(ctx, secret(namespace, name, want), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil // another replica published the same
		}
	case err == nil && (!bytes.Equal(cur.Data[KeyCACert], m.CACert) || string(cur.Data[KeyToken]) != m.Token):
		cur.Data = want
		_, err = secrets.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("secret %s/%s: %w", namespace, name, err)
	}
	return nil
}

func secret(namespace, name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
		Labels: map[string]string{"app.kubernetes.io/part-of": "flowlb"}}, Type: corev1.SecretTypeOpaque, Data: data}
}

func newMaterial() (Material, error) {
	ca, key, err := pki.NewCA("flowlb agent CA")
	if err != nil {
		return Material{}, err
	}
	buf := make([]byte, 24)
	if _, err := rand.Read(buf); err != nil {
		return Material{}, err
	}
	return Material{CACert: ca.PEM, CAKey: key, Token: hex.EncodeToString(buf)}, nil
}

// WriteFiles writes m into dir as agent-ca.crt, agent-ca.key and
// agent-token (mode 0600, the server's defaults in its data directory)
// and returns their paths.
func (m Material) WriteFiles(dir string) (cert, key, token string, err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", "", "", err
	}
	cert, key, token = filepath.Join(dir, "agent-ca.crt"), filepath.Join(dir, "agent-ca.key"), filepath.Join(dir, "agent-token")
	var errs []error
	for p, b := range map[string][]byte{cert: m.CACert, key: m.CAKey, token: []byte(m.Token + "\n")} {
		errs = append(errs, os.WriteFile(p, b, 0o600))
	}
	return cert, key, token, errors.Join(errs...)
}
