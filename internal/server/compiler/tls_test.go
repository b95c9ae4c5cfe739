package compiler

import (
	"context"
	"crypto/tls"
	"errors"
	"reflect"
	"testing"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// fakeCerts serves certificates and secrets by reference.
type fakeCerts map[string]string

func (f fakeCerts) Certificate(_ context.Context, ref string) (flows.L7Certificate, error) {
	if v, ok := f[ref]; ok {
		return flows.L7Certificate{Chain: []byte(v + " chain"), Key: []byte(v + " key")}, nil
	}
	return flows.L7Certificate{}, errors.New("not found")
}

func (f fakeCerts) Secret(_ context.Context, ref string) ([]byte, error) {
	if v, ok := f[ref]; ok {
		return []byte(v), nil
	}
	return nil, errors.New("not found")
}

func tlsSample() *lbaas.Tree {
	t := httpSample()
	l := t.Listeners[0]
	l.Protocol, l.ProtocolPort = "TERMINATED_HTTPS", 443
	l.DefaultTLSContainerRef, l.SNIContainerRefs = ptr("ref-default"), []string{"ref-sni", "ref-default"}
	l.ClientAuthentication, l.ClientCATLSContainerRef, l.ClientCRLContainerRef = "OPTIONAL", ptr("ref-ca"), ptr("ref-crl")
	l.ALPNProtocols, l.TLSVersions, l.HSTSMaxAge, l.HSTSPreload = []string{"h2", "http/1.1"}, []string{"TLSv1.2", "TLSv1.3"}, ptr(3600), true
	l.TLSCiphers = ptr("DHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES256-GCM-SHA384")
	return t
}

// TestCompileTLS: a TERMINATED_HTTPS listener carries its certificates
// (the default first, then the SNI ones, each once), its client CA and
// CRL, ALPN, versions, cipher suites (in tls_ciphers' order) and HSTS;
// without a certificate, or with tls_ciphers that cannot be served, it
// fails closed; without a source of certificates it is not served.
func TestCompileTLS(t *testing.T) {
	certs := fakeCerts{"ref-default": "default", "ref-sni": "sni", "ref-ca": "ca pem", "ref-crl": "crl pem"}
	ss := CompileWith(tlsSample(), certs)
	if len(ss) != 1 || ss[0].L7 == nil || ss[0].AllowNone || ss[0].Key.Port != 443 || ss[0].Key.Protocol != flows.TCP {
		t.Fatalf("services %+v", ss)
	}
	want := &flows.L7TLS{
		Certificates: []flows.L7Certificate{{Chain: []byte("default chain"), Key: []byte("default key")}, {Chain: []byte("sni chain"), Key: []byte("sni key")}},
		ClientAuth:   "OPTIONAL", ClientCA: []byte("ca pem"), ClientCRL: []byte("crl pem"),
		ALPN: []string{"h2", "http/1.1"}, Versions: []string{"TLSv1.2", "TLSv1.3"}, HSTSMaxAge: 3600, HSTSPreload: true,
		CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384},
	}
	if !reflect.DeepEqual(ss[0].L7.TLS, want) {
		t.Errorf("TLS\n got  %+v\n want %+v", ss[0].L7.TLS, want)
	}
	if len(ss[0].L7.Policies) == 0 {
		t.Error("a TERMINATED_HTTPS listener lost its policies")
	}

	delete(certs, "ref-sni")
	if ss := CompileWith(tlsSample(), certs); len(ss) != 1 || ss[0].L7.TLS != nil || !ss[0].AllowNone {
		t.Errorf("a certificate missing: %+v, want the service refusing every connection", ss)
	}
	if ss := Compile(tlsSample()); len(ss) != 0 {
		t.Errorf("without a source of certificates: %+v", ss)
	}
	for list, closed := range map[string]bool{"HIGH:!aNULL": true, "DHE-RSA-AES128-GCM-SHA256": true, "": false} {
		tree := tlsSample()
		tree.Listeners[0].TLSCiphers = ptr(list)
		ss := CompileWith(tree, fakeCerts{"ref-default": "d", "ref-sni": "s", "ref-ca": "c", "ref-crl": "r"})
		if got := ss[0].L7.TLS == nil; got != closed || ss[0].AllowNone != closed {
			t.Errorf("tls_ciphers %q: TLS %+v, refusing every connection %v; want closed %v", list, ss[0].L7.TLS, ss[0].AllowNone, closed)
		}
		if !closed && ss[0].L7.TLS.CipherSuites != nil {
			t.Errorf("tls_ciphers %q: suites %v, want Go's defaults", list, ss[0].L7.TLS.CipherSuites)
		}
	}
	only13 := tlsSample()
	only13.Listeners[0].TLSVersions, only13.Listeners[0].TLSCiphers = []string{"TLSv1.3"}, ptr("HIGH")
	if ss := CompileWith(only13, fakeCerts{"ref-default": "d", "ref-sni": "s", "ref-ca": "c", "ref-crl": "r"}); ss[0].L7.TLS == nil || ss[0].L7.TLS.CipherSuites != nil {
		t.Errorf("TLS 1.3 only: %+v, want served with no suites (the list does not apply)", ss[0].L7.TLS)
	}
	noHSTS := tlsSample()
	noHSTS.Listeners[0].HSTSMaxAge = nil
	if ss := CompileWith(noHSTS, fakeCerts{"ref-default": "d", "ref-sni": "s", "ref-ca": "c", "ref-crl": "r"}); ss[0].L7.TLS.HSTSMaxAge != -1 {
		t.Errorf("no hsts_max_age: %d, want -1", ss[0].L7.TLS.HSTSMaxAge)
	}
}

// TestCompilePoolTLS: a tls_enabled pool carries its TLS to the members,
// its certificates read by reference; tls_enabled alone needs nothing
// read; references on a pool without tls_enabled are not used; a
// reference that cannot be read leaves the pool without members.
func TestCompilePoolTLS(t *testing.T) {
	certs := fakeCerts{"ref-client": "client", "ref-ca": "ca pem", "ref-crl": "crl pem"}
	for _, tc := range []struct {
		name   string
		change func(p *lbaas.Pool)
		certs  Certificates
		want   *flows.L7PoolTLS
		// members: whether the pool keeps its members.
		members bool
	}{
		{"plain", func(p *lbaas.Pool) {}, certs, nil, true},
		{"references without tls_enabled", func(p *lbaas.Pool) { p.CATLSContainerRef = ptr("ref-ca") }, nil, nil, true},
		{"tls_enabled alone, no source of certificates", func(p *lbaas.Pool) {
			p.TLSEnabled, p.ALPNProtocols, p.TLSVersions = true, []string{"h2"}, []string{"TLSv1.3"}
		}, nil, &flows.L7PoolTLS{ALPN: []string{"h2"}, Versions: []string{"TLSv1.3"}}, true},
		{"every reference", func(p *lbaas.Pool) {
			p.TLSEnabled, p.TLSContainerRef, p.CATLSContainerRef, p.CRLContainerRef = true, ptr("ref-client"), ptr("ref-ca"), ptr("ref-crl")
		}, certs, &flows.L7PoolTLS{CA: []byte("ca pem"), CRL: []byte("crl pem"),
			Certificate: &flows.L7Certificate{Chain: []byte("client chain"), Key: []byte("client key")}}, true},
		{"empty references", func(p *lbaas.Pool) { p.TLSEnabled, p.CATLSContainerRef = true, ptr("") }, nil, &flows.L7PoolTLS{}, true},
		{"an unreadable CA", func(p *lbaas.Pool) { p.TLSEnabled, p.CATLSContainerRef = true, ptr("ref-gone") }, certs, nil, false},
		{"an unreadable client certificate", func(p *lbaas.Pool) { p.TLSEnabled, p.TLSContainerRef = true, ptr("ref-gone") }, certs, nil, false},
		{"an unreadable CRL", func(p *lbaas.Pool) {
			p.TLSEnabled, p.CATLSContainerRef, p.CRLContainerRef = true, ptr("ref-ca"), ptr("ref-gone")
		}, certs, nil, false},
		{"references, no source of certificates", func(p *lbaas.Pool) { p.TLSEnabled, p.CATLSContainerRef = true, ptr("ref-ca") }, nil, nil, false},
		{"tls_ciphers", func(p *lbaas.Pool) {
			p.TLSEnabled, p.TLSCiphers = true, ptr("AES128-SHA:ECDHE-RSA-AES128-GCM-SHA256:TLS_AES_128_GCM_SHA256")
		}, nil,
			&flows.L7PoolTLS{CipherSuites: []uint16{tls.TLS_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}}, true},
		{"tls_ciphers with TLS 1.3 only", func(p *lbaas.Pool) {
			p.TLSEnabled, p.TLSVersions, p.TLSCiphers = true, []string{"TLSv1.3"}, ptr("DHE-RSA-AES128-GCM-SHA256")
		}, nil, &flows.L7PoolTLS{Versions: []string{"TLSv1.3"}}, true},
		{"tls_ciphers with no suite served", func(p *lbaas.Pool) { p.TLSEnabled, p.TLSCiphers = true, ptr("DHE-RSA-AES128-GCM-SHA256") }, nil, nil, false},
		{"tls_ciphers with keywords", func(p *lbaas.Pool) { p.TLSEnabled, p.TLSCiphers = true, ptr("HIGH") }, nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := httpSample()
			tc.change(tree.Pools[0])
			ss := CompileWith(tree, tc.certs)
			if len(ss) != 1 || ss[0].L7 == nil {
				t.Fatalf("services %+v", ss)
			}
			p, ok := ss[0].L7.Pool(tree.Pools[0].ID)
			if !ok {
				t.Fatalf("pool %s missing from %+v", tree.Pools[0].ID, ss[0].L7.Pools)
			}
			if !p.TLS.Equal(tc.want) {
				t.Errorf("TLS %+v, want %+v", p.TLS, tc.want)
			}
			all := len(tree.PoolMembers(tree.Pools[0].ID))
			if want := map[bool]int{true: all, false: 0}[tc.members]; len(p.Backends) != want {
				t.Errorf("%d members, want %d", len(p.Backends), want)
			}
			if len(ss[0].Backends) != all {
				t.Errorf("the service's own backends (probes, statistics): %d, want %d", len(ss[0].Backends), all)
			}
		})
	}
}
