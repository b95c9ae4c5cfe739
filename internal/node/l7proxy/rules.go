package l7proxy

import (
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"net/http"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// rule is an L7 rule ready to evaluate: what it reads from a request and
// how it compares. It follows the amphora's HAProxy (Octavia's
// templates) where that is sound: HOST_NAME compares without case, every
// other type with case; a header or cookie that is absent matches
// nothing, so that an inverted rule on it matches; REGEX searches
// (unanchored); a header rule matches when any of the header's
// comma-separated values does.
type rule struct {
	typ    flows.L7RuleType
	key    string
	invert bool
	test   func(string) bool
	// verify: SSL_VERIFY_RESULT's expected result.
	verify int
}

// compileRule checks and prepares a rule; an error names what cannot be
// served (a regular expression Go's RE2 does not accept, an unknown type
// or comparison).
func compileRule(r flows.L7Rule) (rule, error) {
	out := rule{typ: r.Type, key: r.Key, invert: r.Invert}
	fold := false
	switch r.Type {
	case flows.RuleHostName:
		fold = true
	case flows.RulePath, flows.RuleFileType:
	case flows.RuleHeader, flows.RuleCookie, flows.RuleSSLDNField:
		if r.Key == "" {
			return rule{}, fmt.Errorf("a %s rule needs a key", r.Type)
		}
	case flows.RuleSSLConnCert:
		return out, nil
	case flows.RuleSSLVerify:
		n, err := strconv.Atoi(r.Value)
		if err != nil || n < 0 {
			return rule{}, fmt.Errorf("a %s rule's value must be a number, not %q", r.Type, r.Value)
		}
		out.verify = n
		return out, nil
	default:
		return rule{}, fmt.Errorf("unknown L7 rule type %q", r.Type)
	}
	test, err := comparison(r.Compare, r.Value, fold)
	if err != nil {
		return rule{}, err
	}
	out.test = test
	return out, nil
}

// comparison returns the test of a compare type against value.
func comparison(c flows.L7Compare, value string, fold bool) (func(string) bool, error) {
	if c == flows.CompareRegex {
		expr := value
		if fold {
			expr = "(?i)" + expr
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			return nil, fmt.Errorf("regular expression %q: %w", value, err)
		}
		return re.MatchString, nil
	}
	if fold {
		value = strings.ToLower(value)
	}
	var cmp func(s, v string) bool
	switch c {
	case flows.CompareEqualTo:
		cmp = func(s, v string) bool { return s == v }
	case flows.CompareStartsWith:
		cmp = strings.HasPrefix
	case flows.CompareEndsWith:
		cmp = strings.HasSuffix
	case flows.CompareContains:
		cmp = strings.Contains
	default:
		return nil, fmt.Errorf("unknown compare type %q", c)
	}
	if fold {
		return func(s string) bool { return cmp(strings.ToLower(s), value) }, nil
	}
	return func(s string) bool { return cmp(s, value) }, nil
}

// match reports whether the request satisfies the rule.
func (r rule) match(req *http.Request) bool {
	return r.matchValue(req) != r.invert
}

func (r rule) matchValue(req *http.Request) bool {
	switch r.typ {
	case flows.RuleHostName:
		return req.Host != "" && r.test(req.Host)
	case flows.RulePath:
		return r.test(requestPath(req))
	case flows.RuleFileType:
		ext, ok := fileType(requestPath(req))
		return ok && r.test(ext)
	case flows.RuleHeader:
		for _, line := range req.Header.Values(r.key) {
			for v := range strings.SplitSeq(line, ",") {
				if r.test(strings.TrimSpace(v)) {
					return true
				}
			}
		}
		return false
	case flows.RuleCookie:
		c, err := req.Cookie(r.key)
		return err == nil && r.test(c.Value)
	case flows.RuleSSLConnCert:
		return req.TLS != nil && len(req.TLS.PeerCertificates) > 0
	case flows.RuleSSLVerify:
		res, ok := verifyResultOf(req)
		return ok && res == r.verify
	case flows.RuleSSLDNField:
		if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
			return false
		}
		v, ok := dnField(req.TLS.PeerCertificates[0].Subject, r.key)
		return ok && r.test(v)
	}
	return false
}

// requestPath is the path as the client sent it, without the query:
// HAProxy's "path".
func requestPath(req *http.Request) string {
	if req.URL == nil {
		return ""
	}
	if req.URL.Opaque != "" {
		return req.URL.Opaque
	}
	return req.URL.EscapedPath()
}

// fileType is the extension of the path's last segment, without its dot
// ("jpg" of "/img/a.jpg"), and whether it has one: what FILE_TYPE
// compares, as Octavia documents it ("the last portion of the URI
// path"). The amphora instead applies the comparison to the whole path.
func fileType(p string) (string, bool) {
	base := path.Base(p)
	i := strings.LastIndexByte(base, '.')
	if i < 0 || i == len(base)-1 || strings.HasSuffix(p, "/") {
		return "", false
	}
	return base[i+1:], true
}

// dnField is the value of the last attribute of the name with the given
// short name (CN, O, OU, L, ST, C, emailAddress, ...) or dotted OID, as
// HAProxy's ssl_c_s_dn(field) returns it.
func dnField(name pkix.Name, field string) (string, bool) {
	want, ok := dnOIDs[field]
	if !ok {
		oid, err := parseOID(field)
		if err != nil {
			return "", false
		}
		want = oid
	}
	var out string
	found := false
	for _, rdn := range name.Names {
		if rdn.Type.Equal(want) {
			if s, ok := rdn.Value.(string); ok {
				out, found = s, true
			}
		}
	}
	return out, found
}

var dnOIDs = map[string]asn1.ObjectIdentifier{
	"C":            {2, 5, 4, 6},
	"O":            {2, 5, 4, 10},
	"OU":           {2, 5, 4, 11},
	"CN":           {2, 5, 4, 3},
	"SN":           {2, 5, 4, 4},
	"serialNumber": {2, 5, 4, 5},
	"L":            {2, 5, 4, 7},
	"ST":           {2, 5, 4, 8},
	"street":       {2, 5, 4, 9},
	"postalCode":   {2, 5, 4, 17},
	"GN":           {2, 5, 4, 42},
	"emailAddress": {1, 2, 840, 113549, 1, 9, 1},
	"UID":          {0, 9, 2342, 19200300, 100, 1, 1},
	"DC":           {0, 9, 2342, 19200300, 100, 1, 25},
}

func parseOID(s string) (asn1.ObjectIdentifier, error) {
	var oid asn1.ObjectIdentifier
	for part := range strings.SplitSeq(s, ".") {
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("not an OID: %q", s)
		}
		oid = append(oid, n)
	}
	if len(oid) < 2 {
		return nil, fmt.Errorf("not an OID: %q", s)
	}
	return oid, nil
}
