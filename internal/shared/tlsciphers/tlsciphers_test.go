package tlsciphers

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// octaviaDefault is Octavia's CIPHERS_OWASP_SUITE_B (its
// default_listener_ciphers and default_pool_ciphers) on its main branch.
const octaviaDefault = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256:" +
	"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:" +
	"ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:" +
	"DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:DHE-RSA-CHACHA20-POLY1305"

func TestTranslate(t *testing.T) {
	for _, c := range []struct {
		name, list     string
		suites         []uint16
		tls13, dropped []string
	}{
		{name: "one", list: "ECDHE-RSA-AES128-GCM-SHA256", suites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}},
		{name: "order kept", list: "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-CHACHA20-POLY1305:AES128-SHA",
			suites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_RSA_WITH_AES_128_CBC_SHA}},
		{name: "reverse order kept", list: "AES128-SHA:ECDHE-RSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES256-GCM-SHA384",
			suites: []uint16{tls.TLS_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}},
		{name: "duplicates once", list: "AES256-SHA:AES256-SHA:ECDHE-RSA-AES256-SHA:AES256-SHA",
			suites: []uint16{tls.TLS_RSA_WITH_AES_256_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA}},
		{name: "empty elements skipped", list: ":ECDHE-RSA-AES128-SHA::", suites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA}},
		{name: "octavia default", list: octaviaDefault,
			suites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
				tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
				tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256},
			tls13:   []string{"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"},
			dropped: []string{"DHE-RSA-AES128-GCM-SHA256", "DHE-RSA-AES256-GCM-SHA384", "DHE-RSA-CHACHA20-POLY1305"}},
		{name: "insecure to Go but served", list: "ECDHE-ECDSA-AES128-SHA256:AES128-SHA256:ECDHE-RSA-AES128-SHA256:AES256-GCM-SHA384",
			suites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256, tls.TLS_RSA_WITH_AES_128_CBC_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256, tls.TLS_RSA_WITH_AES_256_GCM_SHA384}},
		{name: "3des and rc4 dropped", list: "DES-CBC3-SHA:ECDHE-RSA-DES-CBC3-SHA:RC4-SHA:ECDHE-RSA-RC4-SHA:ECDHE-ECDSA-RC4-SHA:AES128-SHA",
			suites:  []uint16{tls.TLS_RSA_WITH_AES_128_CBC_SHA},
			dropped: []string{"DES-CBC3-SHA", "ECDHE-RSA-DES-CBC3-SHA", "RC4-SHA", "ECDHE-RSA-RC4-SHA", "ECDHE-ECDSA-RC4-SHA"}},
		{name: "unknown and unimplemented dropped", list: "CAMELLIA256-SHA:ECDHE-RSA-AES256-SHA384:NO-SUCH-CIPHER:ecdhe-rsa-aes128-sha:ECDHE-RSA-AES128-SHA",
			suites:  []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA},
			dropped: []string{"CAMELLIA256-SHA", "ECDHE-RSA-AES256-SHA384", "NO-SUCH-CIPHER", "ecdhe-rsa-aes128-sha"}},
		{name: "only tls 1.3 names", list: "TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256", tls13: []string{"TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}},
		{name: "nothing served", list: "DHE-RSA-AES256-GCM-SHA384", dropped: []string{"DHE-RSA-AES256-GCM-SHA384"}},
		{name: "empty", list: ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Translate(c.list)
			if err != nil {
				t.Fatalf("Translate(%q): %v", c.list, err)
			}
			if !slices.Equal(got.Suites, c.suites) || !slices.Equal(got.TLS13, c.tls13) || !slices.Equal(got.Dropped, c.dropped) {
				t.Errorf("Translate(%q) = suites %v, TLS 1.3 %v, dropped %v; want %v, %v, %v", c.list,
					names(got.Suites), got.TLS13, got.Dropped, names(c.suites), c.tls13, c.dropped)
			}
		})
	}
}

func names(ids []uint16) []string {
	var out []string
	for _, id := range ids {
		out = append(out, tls.CipherSuiteName(id))
	}
	return out
}

func TestTranslateRefusesKeywords(t *testing.T) {
	for _, c := range []struct{ list, element string }{
		{"HIGH", "HIGH"},
		{"ECDHE-RSA-AES128-GCM-SHA256:!aNULL", "!aNULL"},
		{"ECDHE-RSA-AES128-GCM-SHA256:@STRENGTH", "@STRENGTH"},
		{"DEFAULT:-AES128-SHA", "DEFAULT"},
		{"AES128-SHA:-AES256-SHA", "-AES256-SHA"},
		{"AES128-SHA:+AES256-SHA", "+AES256-SHA"},
		{"ECDHE+AESGCM:AES128-SHA", "ECDHE+AESGCM"},
		{"AES128-SHA:@SECLEVEL=2", "@SECLEVEL=2"},
		{"AES128-SHA:TLSv1.2", "TLSv1.2"},
		{"AES128-SHA:ECDHE", "ECDHE"},
		{"AES128-SHA:ALL", "ALL"},
		{"AES128-SHA:aRSA", "aRSA"},
		{"AES128-SHA:RC4", "RC4"},
	} {
		_, err := Translate(c.list)
		var ke *KeywordError
		if !errors.As(err, &ke) || ke.Element != c.element {
			t.Errorf("Translate(%q) = %v, want a keyword error for %q", c.list, err, c.element)
		}
	}
}

func TestValidCharacters(t *testing.T) {
	for list, want := range map[string]bool{
		octaviaDefault:                   true,
		"!aNULL:@SECLEVEL=2:TLSv1.2:A+B": true,
		"AES128-SHA AES256-SHA":          false,
		"AES128-SHA,AES256-SHA":          false,
		"AES128-SHA;rm":                  false,
		"AES128-SHA\n":                   false,
		"":                               false,
	} {
		if got := ValidCharacters(list); got != want {
			t.Errorf("ValidCharacters(%q) = %v, want %v", list, got, want)
		}
	}
}

// TestServedAreImplemented checks every name served against Go's own
// lists: a suite Go dropped would fail here, not in a handshake.
func TestServedAreImplemented(t *testing.T) {
	known := map[uint16]bool{}
	for _, s := range append(tls.CipherSuites(), tls.InsecureCipherSuites()...) {
		for _, v := range s.SupportedVersions {
			if v <= tls.VersionTLS12 {
				known[s.ID] = true
			}
		}
	}
	for _, n := range Served() {
		if !known[suites[n]] {
			t.Errorf("%s: %s is not a TLS 1.2 suite Go implements", n, tls.CipherSuiteName(suites[n]))
		}
	}
	if len(Served()) != 17 {
		t.Errorf("%d names served, want 17", len(Served()))
	}
}

// TestNamesAreOpenSSLs checks each name served against the ID the
// system's OpenSSL gives it, and that OpenSSL has no 3DES or RC4 suite
// (why they are dropped).
func TestNamesAreOpenSSLs(t *testing.T) {
	bin, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("no openssl binary")
	}
	for _, n := range Served() {
		out, err := exec.Command(bin, "ciphers", "-V", n+":@SECLEVEL=0").Output()
		if err != nil {
			t.Errorf("openssl ciphers %s: %v", n, err)
			continue
		}
		want := fmt.Sprintf("0x%02X,0x%02X - %s ", suites[n]>>8, suites[n]&0xff, n)
		if !strings.Contains(string(out), want) {
			t.Errorf("openssl ciphers -V %s:\n%s\nwant a line with %q", n, out, want)
		}
	}
	for _, alias := range []string{"3DES", "RC4"} {
		if out, err := exec.Command(bin, "ciphers", "-V", alias+":@SECLEVEL=0").CombinedOutput(); err == nil {
			t.Errorf("openssl ciphers %s found suites:\n%s", alias, out)
		}
	}
}

func TestSuites(t *testing.T) {
	gcm := []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}
	for _, c := range []struct {
		name, list string
		versions   []string
		want       []uint16
		err        string // "keyword", "nosuite" or ""
	}{
		{name: "unset", list: ""},
		{name: "default versions", list: "ECDHE-RSA-AES128-GCM-SHA256", want: gcm},
		{name: "tls 1.2 only", list: "ECDHE-RSA-AES128-GCM-SHA256", versions: []string{"TLSv1.2"}, want: gcm},
		{name: "tls 1.2 and 1.3", list: "ECDHE-RSA-AES128-GCM-SHA256", versions: []string{"TLSv1.2", "TLSv1.3"}, want: gcm},
		{name: "tls 1.3 only: not applied", list: "ECDHE-RSA-AES128-GCM-SHA256", versions: []string{"TLSv1.3"}},
		{name: "nothing served, tls 1.3 only", list: "DHE-RSA-AES128-GCM-SHA256", versions: []string{"TLSv1.3"}},
		{name: "nothing served", list: "DHE-RSA-AES128-GCM-SHA256:TLS_AES_128_GCM_SHA256", err: "nosuite"},
		{name: "nothing served, tls 1.1", list: "DHE-RSA-AES128-GCM-SHA256", versions: []string{"TLSv1.1", "TLSv1.2", "TLSv1.3"}, err: "nosuite"},
		{name: "keyword", list: "HIGH", err: "keyword"},
		{name: "keyword, tls 1.3 only: not applied", list: "HIGH:!aNULL", versions: []string{"TLSv1.3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Suites(c.list, c.versions)
			var ke *KeywordError
			var ne *NoSuiteError
			switch {
			case c.err == "keyword" && !errors.As(err, &ke), c.err == "nosuite" && !errors.As(err, &ne), c.err == "" && err != nil:
				t.Fatalf("Suites(%q, %v) error %v, want %s", c.list, c.versions, err, c.err)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("Suites(%q, %v) = %v, want %v", c.list, c.versions, names(got), names(c.want))
			}
			if ne != nil && !slices.Contains(ne.Dropped, "DHE-RSA-AES128-GCM-SHA256") {
				t.Errorf("NoSuiteError %v does not name the dropped suite", ne)
			}
		})
	}
}
