// Package tlsciphers translates Octavia's tls_ciphers, an OpenSSL cipher
// list as the amphora hands it to HAProxy's "ciphers", into the cipher
// suites Go's TLS is configured with.
//
// An OpenSSL cipher list names the suites of TLS 1.2 and older; TLS 1.3's
// are configured apart (HAProxy's "ciphersuites", which Octavia does not
// set), so they are not the list's business here either: Go offers its
// three TLS 1.3 suites whatever the list says. Names OpenSSL does not know
// are skipped by OpenSSL as long as one of the list's names matches; so
// are, here, names Go's TLS does not implement (DHE, CAMELLIA, ARIA, PSK,
// CCM, SHA384 CBC suites...), and 3DES and RC4, which the amphora's
// OpenSSL 3 lacks too. OpenSSL's keywords and operators (HIGH,
// DEFAULT, !aNULL, ECDHE+AESGCM, @STRENGTH...) select suites by OpenSSL's
// own tables and ordering rules; Go cannot honour them exactly, so they
// are refused rather than approximated.
package tlsciphers

import (
	"crypto/tls"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// suites are the OpenSSL names of the TLS 1.0-1.2 suites Go's TLS
// implements and serves when named, by Go's ID. Those Go lists in
// tls.InsecureCipherSuites with RSA key exchange or CBC with SHA-256 are
// served when a list names them, as OpenSSL 3 serves them: Octavia leaves
// the choice to the user, and to the operator's tls_cipher_prohibit_list.
// Its 3DES and RC4 suites are not: OpenSSL 3 as Debian and Ubuntu build
// it (the amphora's) has neither, so they are dropped as unknown names.
var suites = map[string]uint16{
	"ECDHE-ECDSA-AES128-GCM-SHA256": tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	"ECDHE-RSA-AES128-GCM-SHA256":   tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	"ECDHE-ECDSA-AES256-GCM-SHA384": tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	"ECDHE-RSA-AES256-GCM-SHA384":   tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	"ECDHE-ECDSA-CHACHA20-POLY1305": tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	"ECDHE-RSA-CHACHA20-POLY1305":   tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
	"ECDHE-ECDSA-AES128-SHA":        tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,
	"ECDHE-RSA-AES128-SHA":          tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,
	"ECDHE-ECDSA-AES256-SHA":        tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
	"ECDHE-RSA-AES256-SHA":          tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,
	"ECDHE-ECDSA-AES128-SHA256":     tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256,
	"ECDHE-RSA-AES128-SHA256":       tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256,
	"AES128-GCM-SHA256":             tls.TLS_RSA_WITH_AES_128_GCM_SHA256,
	"AES256-GCM-SHA384":             tls.TLS_RSA_WITH_AES_256_GCM_SHA384,
	"AES128-SHA":                    tls.TLS_RSA_WITH_AES_128_CBC_SHA,
	"AES256-SHA":                    tls.TLS_RSA_WITH_AES_256_CBC_SHA,
	"AES128-SHA256":                 tls.TLS_RSA_WITH_AES_128_CBC_SHA256,
}

// tls13 are the TLS 1.3 suites' names (as Octavia's default lists name
// them): not configured by an OpenSSL cipher list.
var tls13 = []string{"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
	"TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"}

// keywords are OpenSSL's cipher string aliases (openssl-ciphers(1)):
// each stands for a set of suites chosen by OpenSSL's tables.
var keywords = []string{
	"DEFAULT", "COMPLEMENTOFDEFAULT", "ALL", "COMPLEMENTOFALL", "HIGH", "MEDIUM", "LOW", "EXP", "EXPORT",
	"eNULL", "NULL", "aNULL", "kRSA", "aRSA", "RSA", "kDHr", "kDHd", "kDH", "kDHE", "kEDH", "DH", "DHE", "EDH", "ADH",
	"kEECDH", "kECDHE", "ECDH", "ECDHE", "EECDH", "AECDH", "aDSS", "DSS", "aDH", "aECDSA", "ECDSA", "aECDH",
	"TLSv1.2", "TLSv1.0", "TLSv1", "SSLv3", "SSLv2",
	"AES128", "AES256", "AES", "AESGCM", "AESCCM", "AESCCM8", "ARIA128", "ARIA256", "ARIA", "ARIAGCM",
	"CAMELLIA128", "CAMELLIA256", "CAMELLIA", "CHACHA20", "3DES", "DES", "RC4", "RC2", "IDEA", "SEED",
	"MD5", "SHA1", "SHA", "SHA256", "SHA384",
	"aGOST", "aGOST01", "aGOST12", "kGOST", "kGOST18", "GOST94", "GOST89MAC", "GOST12",
	"PSK", "kPSK", "kECDHEPSK", "kDHEPSK", "kRSAPSK", "aPSK", "SUITEB128", "SUITEB128ONLY", "SUITEB192",
	"CBC", "kSRP", "aSRP", "SRP", "FIPS",
}

// validCharacters is Octavia's check of a cipher string
// (octavia.common.validate.check_cipher_string).
var validCharacters = regexp.MustCompile(`^[A-Za-z0-9\-+!:@=_.]+$`)

// CharactersMessage is Octavia's refusal of a cipher string with other
// characters than ValidCharacters allows.
const CharactersMessage = "Invalid characters in cipher string. Only alphanumeric, -, +, !, :, @, =, _, and . are allowed."

// ValidCharacters reports whether a cipher string has only the
// characters Octavia's API allows in one.
func ValidCharacters(list string) bool { return validCharacters.MatchString(list) }

// Names splits a cipher list into its elements, as Octavia's
// tls_cipher_prohibit_list check does: on colons, empty ones left out.
func Names(list string) []string {
	var out []string
	for _, n := range strings.Split(list, ":") {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}

// Translation is what an OpenSSL cipher list gives Go's TLS.
type Translation struct {
	// Suites are the TLS 1.0-1.2 suites named that Go serves, by Go's ID,
	// in the list's order, each once.
	Suites []uint16
	// TLS13 are the TLS 1.3 suites named: not configured by the list.
	TLS13 []string
	// Dropped are the other names, in the list's order: suites Go's TLS
	// does not implement, 3DES and RC4, and names nobody knows.
	Dropped []string
}

// KeywordError is an element of a cipher list that is not a suite's name
// but one of OpenSSL's keywords or operators.
type KeywordError struct{ Element string }

func (e *KeywordError) Error() string {
	return fmt.Sprintf("%q is an OpenSSL keyword or operator, not a cipher suite name", e.Element)
}

// Translate translates an OpenSSL cipher list (colon-separated, as
// Octavia takes it) into Go's suites; it refuses a list with OpenSSL's
// keywords or operators (a *KeywordError).
func Translate(list string) (Translation, error) {
	var out Translation
	for _, n := range Names(list) {
		if isKeyword(n) {
			return Translation{}, &KeywordError{Element: n}
		}
		if id, ok := suites[n]; ok {
			if !slices.Contains(out.Suites, id) {
				out.Suites = append(out.Suites, id)
			}
		} else if slices.Contains(tls13, n) {
			out.TLS13 = append(out.TLS13, n)
		} else {
			out.Dropped = append(out.Dropped, n)
		}
	}
	return out, nil
}

// isKeyword reports whether an element of a list is OpenSSL syntax other
// than a suite's name: an operator prefix (!, -, +), a command (@...), a
// combination (ECDHE+AESGCM) or an alias.
func isKeyword(n string) bool {
	return strings.ContainsAny(n[:1], "!-+@") || strings.Contains(n, "+") || slices.Contains(keywords, n)
}

// Served are the OpenSSL names of the suites Go serves, sorted.
func Served() []string {
	var out []string
	for n := range suites {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// NoSuiteError is a list that names no suite Go serves, for a listener
// or pool that allows TLS 1.2 or older: OpenSSL's "no cipher match",
// which keeps HAProxy from loading such a configuration.
type NoSuiteError struct {
	// Dropped are the list's names that are not served.
	Dropped []string
}

func (e *NoSuiteError) Error() string {
	return fmt.Sprintf("no cipher suite of TLS 1.2 and older that the proxy serves is named (%s are not)", strings.Join(e.Dropped, ", "))
}

// Suites are the suites a tls_ciphers gives Go's TLS for a listener or
// pool with the TLS versions named (Octavia's names; none: TLS 1.2 and
// 1.3): none when the list is empty or only TLS 1.3 is allowed (the
// list does not apply, as in HAProxy, whatever it holds), else
// Translate's, which must not be none (a *NoSuiteError), nor OpenSSL's
// keywords (a *KeywordError).
func Suites(list string, versions []string) ([]uint16, error) {
	if list == "" || len(versions) > 0 && !slices.ContainsFunc(versions, func(v string) bool { return v != "TLSv1.3" }) {
		return nil, nil
	}
	tr, err := Translate(list)
	if err != nil {
		return nil, err
	}
	if len(tr.Suites) == 0 {
		return nil, &NoSuiteError{Dropped: append(tr.TLS13, tr.Dropped...)}
	}
	return tr.Suites, nil
}
