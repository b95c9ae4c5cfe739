package tlscerts

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/keymanager/v1/acls"
	"github.com/gophercloud/gophercloud/v2/openstack/keymanager/v1/containers"
	"github.com/gophercloud/gophercloud/v2/openstack/keymanager/v1/secrets"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Barbican reads certificates from Barbican with a Keystone token, and
// gives the server's service user read access to them (Barbican's ACLs),
// as Octavia's API does before its worker reads them as that user.
type Barbican struct {
	// HTTP is the client of Barbican's API (nil: http.DefaultClient).
	HTTP *http.Client
	// ServiceUser returns the Keystone user id of the server's service
	// user.
	ServiceUser func(ctx context.Context) (string, error)
}

// ref is a Barbican reference: the API's base URL, secrets or
// containers, and the id.
type ref struct {
	endpoint, kind, id string
}

// parseRef reads a reference as Octavia takes it: the URL of a secret
// or a container, .../v1/secrets/ID or .../v1/containers/ID.
func parseRef(s string) (ref, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return ref{}, fmt.Errorf("not a Barbican reference: %q", s)
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) < 2 {
		return ref{}, fmt.Errorf("not a Barbican reference: %q", s)
	}
	kind, id := parts[len(parts)-2], parts[len(parts)-1]
	if (kind != "secrets" && kind != "containers") || id == "" {
		return ref{}, fmt.Errorf("not a Barbican secret or container: %q", s)
	}
	base := *u
	base.Path = "/" + strings.Join(parts[:len(parts)-2], "/")
	if !strings.HasSuffix(base.Path, "/") {
		base.Path += "/"
	}
	base.RawQuery, base.Fragment = "", ""
	return ref{endpoint: base.String(), kind: kind, id: id}, nil
}

func (b *Barbican) client(r ref, token string) *gophercloud.ServiceClient {
	hc := http.DefaultClient
	if b.HTTP != nil {
		hc = b.HTTP
	}
	pc := &gophercloud.ProviderClient{TokenID: token, HTTPClient: *hc}
	return &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: r.endpoint, ResourceBase: r.endpoint}
}

// Certificate reads a listener's certificate: a secret holding a PKCS12
// bundle, or a certificate container (certificate, private_key,
// intermediates).
func (b *Barbican) Certificate(ctx context.Context, reference, token string) (flows.L7Certificate, error) {
	r, err := parseRef(reference)
	if err != nil {
		return flows.L7Certificate{}, err
	}
	c := b.client(r, token)
	if r.kind == "secrets" {
		data, err := payload(ctx, c, r.id, "application/octet-stream")
		if err != nil {
			return flows.L7Certificate{}, err
		}
		return FromPKCS12(data)
	}
	ct, err := containers.Get(ctx, c, r.id).Extract()
	if err != nil {
		return flows.L7Certificate{}, fmt.Errorf("container %s: %w", r.id, err)
	}
	parts := map[string][]byte{}
	for _, sr := range ct.SecretRefs {
		s, err := parseRef(sr.SecretRef)
		if err != nil {
			return flows.L7Certificate{}, err
		}
		if parts[sr.Name], err = payload(ctx, b.client(s, token), s.id, "text/plain"); err != nil {
			return flows.L7Certificate{}, err
		}
	}
	if len(parts["private_key_passphrase"]) > 0 {
		return flows.L7Certificate{}, fmt.Errorf("container %s: a private key with a pass phrase is not supported", r.id)
	}
	return FromParts(parts["certificate"], parts["private_key"], parts["intermediates"])
}

// Secret reads a secret's payload (a client CA or revocation list).
func (b *Barbican) Secret(ctx context.Context, reference, token string) ([]byte, error) {
	r, err := parseRef(reference)
	if err != nil {
		return nil, err
	}
	if r.kind != "secrets" {
		return nil, fmt.Errorf("not a Barbican secret: %q", reference)
	}
	return payload(ctx, b.client(r, token), r.id, "text/plain")
}

func payload(ctx context.Context, c *gophercloud.ServiceClient, id, contentType string) ([]byte, error) {
	data, err := secrets.GetPayload(ctx, c, id, secrets.GetPayloadOpts{PayloadContentType: contentType}).Extract()
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", id, err)
	}
	return data, nil
}

// Grant adds the service user to the readers of a reference, and of
// each secret of a container (Barbican's ACLs), with the caller's token:
// the server reads them as that user afterwards.
func (b *Barbican) Grant(ctx context.Context, reference, token string) error {
	r, err := parseRef(reference)
	if err != nil {
		return err
	}
	if b.ServiceUser == nil {
		return fmt.Errorf("no service user to grant %s to", reference)
	}
	user, err := b.ServiceUser(ctx)
	if err != nil {
		return fmt.Errorf("the service user to grant %s to: %w", reference, err)
	}
	users := []string{user}
	opts := acls.SetOpts{{Type: "read", Users: &users}}
	c := b.client(r, token)
	if r.kind == "secrets" {
		_, err := acls.UpdateSecretACL(ctx, c, r.id, opts).Extract()
		return err
	}
	if _, err := acls.UpdateContainerACL(ctx, c, r.id, opts).Extract(); err != nil {
		return err
	}
	ct, err := containers.Get(ctx, c, r.id).Extract()
	if err != nil {
		return err
	}
	for _, sr := range ct.SecretRefs {
		s, err := parseRef(sr.SecretRef)
		if err != nil {
			return err
		}
		if _, err := acls.UpdateSecretACL(ctx, b.client(s, token), s.id, opts).Extract(); err != nil {
			return err
		}
	}
	return nil
}
