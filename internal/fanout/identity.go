package fanout

import (
	"context"
	"crypto/subtle"
	"crypto/x509"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/pki"
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
	node, err := h.peerNode(ctx)
	if err != nil {
		return "", status.Errorf(codes.Unauthenticated, "a node identity is required (enroll with the bootstrap token first): %v", err)
	}
	return node, nil
}

// peerNode is the node whose identity the caller's TLS certificate is.
func (h *Hub) peerNode(ctx context.Context) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", status.Error(codes.Unauthenticated, "no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return "", status.Error(codes.Unauthenticated, "the connection is not TLS")
	}
	return pki.VerifyPeer(info.State, h.roots(), pki.RoleNode)
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
// whoever holds the bootstrap token.
func (h *Hub) Enroll(ctx context.Context, req *agentv1.EnrollRequest) (*agentv1.EnrollResponse, error) {
	if h.o.Identities == nil {
		return nil, status.Error(codes.Unimplemented, "this server issues no identities")
	}
	node := req.GetNode()
	kind := "renewal"
	if who, err := h.peerNode(ctx); err != nil || who != node {
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
	h.m.identities.WithLabelValues(kind).Inc()
	h.log.Info("issued a node identity", "node", node, "kind", kind, "ttl", h.o.IdentityTTL)
	return &agentv1.EnrollResponse{Certificate: der}, nil
}
