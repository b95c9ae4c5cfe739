package flowpb

import (
	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// L7ToProto encodes an HTTP listener's L7 configuration; nil is none.
func L7ToProto(l *flows.L7) *agentv1.L7 {
	if l == nil {
		return nil
	}
	out := &agentv1.L7{
		DefaultPool: l.DefaultPool, InsertHeaders: l.InsertHeaders,
		ClientTimeoutMs: l.ClientTimeout.Milliseconds(), ConnectTimeoutMs: l.ConnectTimeout.Milliseconds(), MemberTimeoutMs: l.MemberTimeout.Milliseconds(),
	}
	if t := l.TLS; t != nil {
		out.Tls = &agentv1.L7TLS{ClientAuth: t.ClientAuth, ClientCa: t.ClientCA, ClientCrl: t.ClientCRL, Alpn: t.ALPN, Versions: t.Versions,
			HstsMaxAge: int32(t.HSTSMaxAge), HstsIncludeSubdomains: t.HSTSIncludeSubdomains, HstsPreload: t.HSTSPreload,
			CipherSuites: suitesToProto(t.CipherSuites)}
		for _, c := range t.Certificates {
			out.Tls.Certificates = append(out.Tls.Certificates, &agentv1.L7Certificate{Chain: c.Chain, Key: c.Key})
		}
	}
	for _, p := range l.Policies {
		pp := &agentv1.L7Policy{Id: p.ID, Action: string(p.Action), Pool: p.Pool, Url: p.URL, Code: int32(p.Code)}
		for _, r := range p.Rules {
			pp.Rules = append(pp.Rules, &agentv1.L7Rule{Type: string(r.Type), Compare: string(r.Compare), Key: r.Key, Value: r.Value, Invert: r.Invert})
		}
		out.Policies = append(out.Policies, pp)
	}
	for _, p := range l.Pools {
		pp := &agentv1.L7Pool{Id: p.ID, Algorithm: string(p.Algorithm), ProxyProtocol: int32(p.ProxyProtocol)}
		if sp := p.Persistence; sp != nil {
			pp.Persistence = &agentv1.L7Persistence{Type: sp.Type, CookieName: sp.CookieName, TimeoutMs: sp.Timeout.Milliseconds()}
		}
		for _, b := range p.Backends {
			pp.Backends = append(pp.Backends, BackendToProto(b))
		}
		if t := p.TLS; t != nil {
			pp.Tls = &agentv1.L7PoolTLS{Ca: t.CA, Crl: t.CRL, Alpn: t.ALPN, Versions: t.Versions, CipherSuites: suitesToProto(t.CipherSuites)}
			if c := t.Certificate; c != nil {
				pp.Tls.Certificate = &agentv1.L7Certificate{Chain: c.Chain, Key: c.Key}
			}
		}
		out.Pools = append(out.Pools, pp)
	}
	return out
}

// L7FromProto is the inverse of L7ToProto.
func L7FromProto(p *agentv1.L7) *flows.L7 {
	if p == nil {
		return nil
	}
	out := &flows.L7{
		DefaultPool: p.GetDefaultPool(), InsertHeaders: p.GetInsertHeaders(),
		ClientTimeout: millis(p.GetClientTimeoutMs()), ConnectTimeout: millis(p.GetConnectTimeoutMs()), MemberTimeout: millis(p.GetMemberTimeoutMs()),
	}
	if t := p.GetTls(); t != nil {
		out.TLS = &flows.L7TLS{ClientAuth: t.GetClientAuth(), ClientCA: t.GetClientCa(), ClientCRL: t.GetClientCrl(), ALPN: t.GetAlpn(),
			Versions: t.GetVersions(), HSTSMaxAge: int(t.GetHstsMaxAge()), HSTSIncludeSubdomains: t.GetHstsIncludeSubdomains(), HSTSPreload: t.GetHstsPreload(),
			CipherSuites: suitesFromProto(t.GetCipherSuites())}
		for _, c := range t.GetCertificates() {
			out.TLS.Certificates = append(out.TLS.Certificates, flows.L7Certificate{Chain: c.GetChain(), Key: c.GetKey()})
		}
	}
	for _, pp := range p.GetPolicies() {
		pol := flows.L7Policy{ID: pp.GetId(), Action: flows.L7Action(pp.GetAction()), Pool: pp.GetPool(), URL: pp.GetUrl(), Code: int(pp.GetCode())}
		for _, r := range pp.GetRules() {
			pol.Rules = append(pol.Rules, flows.L7Rule{Type: flows.L7RuleType(r.GetType()), Compare: flows.L7Compare(r.GetCompare()), Key: r.GetKey(), Value: r.GetValue(), Invert: r.GetInvert()})
		}
		out.Policies = append(out.Policies, pol)
	}
	for _, pp := range p.GetPools() {
		pool := flows.L7Pool{ID: pp.GetId(), Algorithm: flows.Algorithm(pp.GetAlgorithm()), ProxyProtocol: int(pp.GetProxyProtocol())}
		if sp := pp.GetPersistence(); sp != nil {
			pool.Persistence = &flows.L7Persistence{Type: sp.GetType(), CookieName: sp.GetCookieName(), Timeout: millis(sp.GetTimeoutMs())}
		}
		for _, b := range pp.GetBackends() {
			pool.Backends = append(pool.Backends, BackendFromProto(b))
		}
		if t := pp.GetTls(); t != nil {
			pool.TLS = &flows.L7PoolTLS{CA: t.GetCa(), CRL: t.GetCrl(), ALPN: t.GetAlpn(), Versions: t.GetVersions(),
				CipherSuites: suitesFromProto(t.GetCipherSuites())}
			if c := t.GetCertificate(); c != nil {
				pool.TLS.Certificate = &flows.L7Certificate{Chain: c.GetChain(), Key: c.GetKey()}
			}
		}
		out.Pools = append(out.Pools, pool)
	}
	return out
}

func suitesToProto(ids []uint16) []uint32 {
	var out []uint32
	for _, id := range ids {
		out = append(out, uint32(id))
	}
	return out
}

// suitesFromProto keeps the IDs a cipher suite's can be (16 bits); a
// wider one names no suite and is left out.
func suitesFromProto(ids []uint32) []uint16 {
	var out []uint16
	for _, id := range ids {
		if id <= 0xffff {
			out = append(out, uint16(id))
		}
	}
	return out
}
