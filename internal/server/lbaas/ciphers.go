package lbaas

import (
	"slices"
	"strings"

	"github.com/flowlb/flowlb/internal/shared/tlsciphers"
)

// checkCiphers refuses a tls_ciphers as Octavia's API does, whatever the
// provider: one with characters no cipher string has, or naming a cipher
// the operator prohibits (Config.TLSCipherProhibitList, Octavia's
// [api_settings] tls_cipher_prohibit_list). Unset, null and "" are not
// checked, as Octavia does not check them.
func (s *Service) checkCiphers(o Opt[*string]) error {
	if !o.Set || o.Value == nil || *o.Value == "" {
		return nil
	}
	if !tlsciphers.ValidCharacters(*o.Value) {
		return Validation(tlsciphers.CharactersMessage)
	}
	var rejected []string
	for _, n := range tlsciphers.Names(*o.Value) {
		if slices.Contains(s.cfg.TLSCipherProhibitList, n) {
			rejected = append(rejected, n)
		}
	}
	if len(rejected) > 0 {
		return Validation("The following ciphers have been prohibited by an administrator: %s", strings.Join(rejected, ", "))
	}
	return nil
}
