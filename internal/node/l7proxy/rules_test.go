package l7proxy

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

func request(t *testing.T, target string, header ...string) *http.Request {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		if strings.EqualFold(header[i], "Host") {
			req.Host = header[i+1]
			continue
		}
		req.Header.Add(header[i], header[i+1])
	}
	return req
}

func TestRuleMatch(t *testing.T) {
	withCert := request(t, "https://app.example/")
	withCert.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{
		Names: []pkix.AttributeTypeAndValue{
			{Type: asn1.ObjectIdentifier{2, 5, 4, 11}, Value: "ops"},
			{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: "alice"},
			{Type: asn1.ObjectIdentifier{2, 5, 4, 11}, Value: "admins"},
		},
	}}}}
	verified := withCert.WithContext(withVerifyResult(withCert.Context(), 0))

	for _, tc := range []struct {
		name string
		rule flows.L7Rule
		req  *http.Request
		want bool
	}{
		{"host equal, any case", flows.L7Rule{Type: flows.RuleHostName, Compare: flows.CompareEqualTo, Value: "WWW.example.com"},
			request(t, "http://www.Example.com/"), true},
		{"host equal needs the port too", flows.L7Rule{Type: flows.RuleHostName, Compare: flows.CompareEqualTo, Value: "www.example.com"},
			request(t, "http://www.example.com:8080/"), false},
		{"host regex, any case", flows.L7Rule{Type: flows.RuleHostName, Compare: flows.CompareRegex, Value: `^api\.`},
			request(t, "http://API.example.com/"), true},
		{"host ends with", flows.L7Rule{Type: flows.RuleHostName, Compare: flows.CompareEndsWith, Value: ".example.com"},
			request(t, "http://a.example.org/"), false},
		{"path starts with", flows.L7Rule{Type: flows.RulePath, Compare: flows.CompareStartsWith, Value: "/api/"},
			request(t, "/api/v1?x=/other"), true},
		{"path leaves the query out", flows.L7Rule{Type: flows.RulePath, Compare: flows.CompareContains, Value: "x="},
			request(t, "/api/v1?x=1"), false},
		{"path compares with case", flows.L7Rule{Type: flows.RulePath, Compare: flows.CompareStartsWith, Value: "/API"},
			request(t, "/api"), false},
		{"path as sent, still escaped", flows.L7Rule{Type: flows.RulePath, Compare: flows.CompareEqualTo, Value: "/a%2Fb"},
			request(t, "/a%2Fb"), true},
		{"path regex unanchored", flows.L7Rule{Type: flows.RulePath, Compare: flows.CompareRegex, Value: `v[0-9]+/`},
			request(t, "/api/v2/x"), true},
		{"inverted path", flows.L7Rule{Type: flows.RulePath, Compare: flows.CompareStartsWith, Value: "/api", Invert: true},
			request(t, "/static"), true},
		{"file type equal", flows.L7Rule{Type: flows.RuleFileType, Compare: flows.CompareEqualTo, Value: "jpg"},
			request(t, "/img/cat.jpg?size=2"), true},
		{"file type is the last segment's", flows.L7Rule{Type: flows.RuleFileType, Compare: flows.CompareEqualTo, Value: "d"},
			request(t, "/conf.d/file"), false},
		{"file type regex", flows.L7Rule{Type: flows.RuleFileType, Compare: flows.CompareRegex, Value: `^(png|gif)$`},
			request(t, "/a/b.gif"), true},
		{"no file type in a directory", flows.L7Rule{Type: flows.RuleFileType, Compare: flows.CompareRegex, Value: `.*`},
			request(t, "/a/b.d/"), false},
		{"header equal", flows.L7Rule{Type: flows.RuleHeader, Compare: flows.CompareEqualTo, Key: "x-version", Value: "2"},
			request(t, "/", "X-Version", "2"), true},
		{"header any of its values", flows.L7Rule{Type: flows.RuleHeader, Compare: flows.CompareEqualTo, Key: "Accept", Value: "text/html"},
			request(t, "/", "Accept", "application/json, text/html", "Accept", "x/y"), true},
		{"header compares with case", flows.L7Rule{Type: flows.RuleHeader, Compare: flows.CompareEqualTo, Key: "X-Env", Value: "prod"},
			request(t, "/", "X-Env", "PROD"), false},
		{"absent header matches nothing", flows.L7Rule{Type: flows.RuleHeader, Compare: flows.CompareRegex, Key: "X-Env", Value: ".*"},
			request(t, "/"), false},
		{"absent header, inverted", flows.L7Rule{Type: flows.RuleHeader, Compare: flows.CompareEqualTo, Key: "X-Env", Value: "prod", Invert: true},
			request(t, "/"), true},
		{"cookie contains", flows.L7Rule{Type: flows.RuleCookie, Compare: flows.CompareContains, Key: "tier", Value: "gold"},
			request(t, "/", "Cookie", "a=1; tier=platinum-gold"), true},
		{"other cookie", flows.L7Rule{Type: flows.RuleCookie, Compare: flows.CompareContains, Key: "tier", Value: "gold"},
			request(t, "/", "Cookie", "gold=tier"), false},
		{"no certificate on plain HTTP", flows.L7Rule{Type: flows.RuleSSLConnCert, Compare: flows.CompareEqualTo, Value: "tRUe"},
			request(t, "/"), false},
		{"a certificate", flows.L7Rule{Type: flows.RuleSSLConnCert, Compare: flows.CompareEqualTo, Value: "tRUe"},
			withCert, true},
		{"verify result unknown", flows.L7Rule{Type: flows.RuleSSLVerify, Compare: flows.CompareEqualTo, Value: "0"},
			withCert, false},
		{"verified", flows.L7Rule{Type: flows.RuleSSLVerify, Compare: flows.CompareEqualTo, Value: "0"},
			verified, true},
		{"verified, other result asked", flows.L7Rule{Type: flows.RuleSSLVerify, Compare: flows.CompareEqualTo, Value: "10"},
			verified, false},
		{"DN field", flows.L7Rule{Type: flows.RuleSSLDNField, Compare: flows.CompareEqualTo, Key: "CN", Value: "alice"},
			withCert, true},
		{"DN field's last occurrence", flows.L7Rule{Type: flows.RuleSSLDNField, Compare: flows.CompareEqualTo, Key: "OU", Value: "admins"},
			withCert, true},
		{"DN field by OID", flows.L7Rule{Type: flows.RuleSSLDNField, Compare: flows.CompareStartsWith, Key: "2.5.4.3", Value: "ali"},
			withCert, true},
		{"DN field absent", flows.L7Rule{Type: flows.RuleSSLDNField, Compare: flows.CompareRegex, Key: "O", Value: ".*"},
			withCert, false},
		{"DN field without TLS", flows.L7Rule{Type: flows.RuleSSLDNField, Compare: flows.CompareRegex, Key: "CN", Value: ".*"},
			request(t, "/"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := compileRule(tc.rule)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.match(tc.req); got != tc.want {
				t.Errorf("match = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCompileRuleRefuses: what cannot be evaluated is an error, never a
// rule that silently never matches.
func TestCompileRuleRefuses(t *testing.T) {
	for _, tc := range []struct {
		rule flows.L7Rule
		want string
	}{
		{flows.L7Rule{Type: flows.RulePath, Compare: flows.CompareRegex, Value: `(?<=/)api`}, "regular expression"},
		{flows.L7Rule{Type: flows.RuleHostName, Compare: flows.CompareRegex, Value: `(a`}, "regular expression"},
		{flows.L7Rule{Type: flows.RulePath, Compare: "LIKE", Value: "/"}, "unknown compare type"},
		{flows.L7Rule{Type: "BODY", Compare: flows.CompareEqualTo, Value: "x"}, "unknown L7 rule type"},
		{flows.L7Rule{Type: flows.RuleHeader, Compare: flows.CompareEqualTo, Value: "x"}, "needs a key"},
		{flows.L7Rule{Type: flows.RuleSSLVerify, Compare: flows.CompareEqualTo, Value: "ok"}, "must be a number"},
	} {
		if _, err := compileRule(tc.rule); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("compileRule(%+v) = %v, want an error with %q", tc.rule, err, tc.want)
		}
	}
}

func TestFileType(t *testing.T) {
	for _, tc := range []struct {
		path, want string
		ok         bool
	}{
		{"/a.jpg", "jpg", true},
		{"/a/b.tar.gz", "gz", true},
		{"/a.", "", false},
		{"/noext", "", false},
		{"/", "", false},
		{"", "", false},
		{"/dir.d/", "", false},
	} {
		got, ok := fileType(tc.path)
		if got != tc.want || ok != tc.ok {
			t.Errorf("fileType(%q) = %q, %v; want %q, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
}
