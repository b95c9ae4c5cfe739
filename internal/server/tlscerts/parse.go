// Package tlscerts reads a TLS listener's certificates where Octavia
// takes them from: Barbican, with the caller's Keystone token, a
// reference naming either a secret that holds a PKCS12 bundle or
// (Octavia's legacy form) a certificate container of a certificate, its
// key and intermediates; and it checks them as Octavia does, with its
// error texts. What it returns is key material: it is held in memory,
// never logged.
package tlscerts

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	"software.sslmate.com/src/go-pkcs12"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Refusal is what Octavia says of a certificate it refuses, in its
// words.
type Refusal string

func (r Refusal) Error() string { return string(r) }

// Octavia's texts for what it refuses in a certificate.
const (
	ErrUnreadableCert Refusal = "Could not read X509 from PEM"
	ErrMismatchedKey  Refusal = "Key and x509 certificate do not match"
	ErrNoSubject      Refusal = "No CN or DNSName(s) found in certificate. The certificate is invalid."
	ErrPKCS12         Refusal = "The PKCS12 bundle is unreadable. Please check the PKCS12 bundle validity. In addition, make sure it does not require a pass phrase. Error: "
)

// FromParts is a certificate, its private key and its intermediates
// (PEM) as a listener's certificate: the chain leaf first, the key
// checked against it, the leaf required to name a host (a CN or a DNS
// name).
func FromParts(cert, key, intermediates []byte) (flows.L7Certificate, error) {
	leaf, err := firstCert(cert)
	if err != nil {
		return flows.L7Certificate{}, err
	}
	chain := pemCert(leaf.Raw)
	for _, der := range pemBlocks(intermediates, "CERTIFICATE") {
		chain = append(chain, pemCert(der)...)
	}
	return checked(leaf, flows.L7Certificate{Chain: chain, Key: bytes.TrimSpace(key)})
}

// FromPKCS12 is a PKCS12 bundle without a pass phrase (Octavia's form of
// a certificate in one Barbican secret) as a listener's certificate.
func FromPKCS12(data []byte) (flows.L7Certificate, error) {
	key, leaf, cas, err := pkcs12.DecodeChain(data, "")
	if err != nil {
		return flows.L7Certificate{}, fmt.Errorf("%w%v", ErrPKCS12, err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return flows.L7Certificate{}, fmt.Errorf("%w%v", ErrPKCS12, err)
	}
	chain := pemCert(leaf.Raw)
	for _, c := range cas {
		chain = append(chain, pemCert(c.Raw)...)
	}
	return checked(leaf, flows.L7Certificate{Chain: chain, Key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})})
}

func checked(leaf *x509.Certificate, c flows.L7Certificate) (flows.L7Certificate, error) {
	if leaf.Subject.CommonName == "" && len(leaf.DNSNames) == 0 {
		return flows.L7Certificate{}, ErrNoSubject
	}
	if _, err := tls.X509KeyPair(c.Chain, c.Key); err != nil {
		return flows.L7Certificate{}, ErrMismatchedKey
	}
	return c, nil
}

// CA is a client CA secret's payload: PEM certificates, at least one.
func CA(data []byte) ([]byte, error) {
	if _, err := firstCert(data); err != nil {
		return nil, err
	}
	return data, nil
}

// CRL is a client CRL secret's payload: PEM revocation lists.
func CRL(data []byte) ([]byte, error) {
	lists := pemBlocks(data, "X509 CRL")
	if len(lists) == 0 {
		return nil, errors.New("the client CRL holds no revocation list")
	}
	for _, der := range lists {
		if _, err := x509.ParseRevocationList(der); err != nil {
			return nil, fmt.Errorf("the client CRL does not parse: %w", err)
		}
	}
	return data, nil
}

func firstCert(data []byte) (*x509.Certificate, error) {
	certs := pemBlocks(data, "CERTIFICATE")
	if len(certs) == 0 {
		return nil, ErrUnreadableCert
	}
	c, err := x509.ParseCertificate(certs[0])
	if err != nil {
		return nil, ErrUnreadableCert
	}
	return c, nil
}

// pemBlocks are the contents of data's PEM blocks of a type, in order.
func pemBlocks(data []byte, typ string) [][]byte {
	var out [][]byte
	for rest := data; len(rest) > 0; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type == typ {
			out = append(out, b.Bytes)
		}
	}
	return out
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
