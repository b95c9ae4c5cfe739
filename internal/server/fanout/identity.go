package fanout

import (
	"context"
	"crypto/subtle"
	"crypto/x509"
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/shared/pki"
)

// authenticate says who calls: with identities, the node its verified TLS
// certificate names; without (tests), anyone with the token ("": any
// node).
func (h *Hub) authenticate(ctx context.Context) (string, error) {
	if h.o.Identities == nil {
		if !h.tokenValid(ctx) {
			return "", status.Error(codes.Unauthenticated, "bad or missing agent token")
		}
		return "", nil
	}
	node, _, err := h.peerNode(ctx)
	if err != nil {
		return "", status.Errorf(codes.Unauthenticated, "a node identity is required (enroll with the bootstrap token first): %v", err)
	}
	return node, nil
}

// peerNode is the node whose identity the caller's TLS certificate is,
// and that certificate.
func (h *Hub) peerNode(ctx context.Context) (string, *x509.Certificate, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", nil, status.Error(codes.Unauthenticated, "no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return "", nil, status.Error(codes.Unauthenticated, "the connection is not TLS")
	}
	node, err := pki.VerifyPeer(info.State, h.roots(), pki.RoleNode)
	if err != nil {
		return "", nil, err
	}
	return node, info.State.PeerCertificates[0], nil
}

func (h *Hub) roots() *x509.CertPool { return h.o.Identities.Pool() }

func (h *Hub) tokenValid(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	got := ""
	if v := md.Get("authorization"); len(v) > 0 {
		got = strings.TrimPrefix(v[0], "Bearer ")
	}
	return h.o.Token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(h.o.Token)) == 1
}

// Enroll issues a node's identity: to a node renewing its own, or to
// whoever holds the bootstrap token. A name is bound to the identity last
// issued for it, in the store that the replicas share: the token does not
// enroll a name whose identity is valid (unless it asks for that
// identity's own key again, as a node whose answer was lost does), and
// only that identity, or the one before it, renews it.
func (h *Hub) Enroll(ctx context.Context, req *agentv1.EnrollRequest) (*agentv1.EnrollResponse, error) {
	if h.o.Identities == nil {
		return nil, status.Error(codes.Unimplemented, "this server issues no identities")
	}
	node := req.GetNode()
	kind := "renewal"
	who, presented, err := h.peerNode(ctx)
	if err != nil || who != node {
		if !h.tokenValid(ctx) {
			h.m.authFailures.Inc()
			if err == nil {
				return nil, status.Errorf(codes.PermissionDenied, "node %q may not enroll as %q", who, node)
			}
			return nil, status.Error(codes.Unauthenticated, "bad or missing bootstrap token")
		}
		kind = "enrollment"
	}
	der, err := h.o.Identities.SignNode(req.GetCertificateRequest(), node, h.o.IdentityTTL)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%v", err)
	}
	if err := h.bind(ctx, node, kind, der, presented); err != nil {
		return nil, err
	}
	h.m.identities.WithLabelValues(kind).Inc()
	h.log.Info("issued a node identity", "node", node, "kind", kind, "ttl", h.o.IdentityTTL)
	return &agentv1.EnrollResponse{Certificate: der}, nil
}

// bind records the identity der as node's, issued by kind (to the
// identity presented, on a renewal), or says why the name is not the
// caller's: the identity is then never handed out.
func (h *Hub) bind(ctx context.Context, node, kind string, der []byte, presented *x509.Certificate) error {
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return status.Errorf(codes.Internal, "the identity issued: %v", err)
	}
	id := store.NodeIdentity{Node: node, NotAfter: leaf.NotAfter, Issued: time.Now()}
	if id.Key, err = pki.KeyID(leaf.PublicKey); err == nil {
		id.CA, err = pki.KeyID(h.o.Identities.Cert.PublicKey)
	}
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "the requested key: %v", err)
	}
	var held store.NodeIdentity
	if kind == "enrollment" {
		held, err = h.st.EnrollNode(ctx, id)
	} else {
		var was string
		if was, err = pki.KeyID(presented.PublicKey); err == nil {
			held, err = h.st.RenewNode(ctx, id, was)
		}
	}
	switch {
	case errors.Is(err, store.ErrConflict) && kind == "enrollment":
		h.m.bindingRefusals.WithLabelValues(kind).Inc()
		h.log.Warn("refused to enroll a node name bound to a valid identity", "node", node, "until", held.NotAfter)
		return status.Errorf(codes.PermissionDenied, "node %q is enrolled already, with an identity valid until %s: "+
			"the bootstrap token cannot enroll it again while that identity is valid "+
			"(an agent that lost it enrolls again once it expires, or at once after `flowlb server node forget %s`)",
			node, held.NotAfter.UTC().Format(time.RFC3339), node)
	case errors.Is(err, store.ErrConflict):
		h.m.bindingRefusals.WithLabelValues(kind).Inc()
		h.log.Warn("refused to renew a node identity the name is no longer bound to", "node", node)
		return status.Errorf(codes.PermissionDenied, "node %q: this identity is no longer the one the name is bound to "+
			"(released by `flowlb server node forget`, or the node enrolled again since): it cannot be renewed", node)
	case err != nil:
		return status.Errorf(codes.Unavailable, "record node %q's identity: %v", node, err)
	}
	return nil
}
