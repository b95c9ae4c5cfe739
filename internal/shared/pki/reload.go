package pki

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// reloadCheck bounds how often the files are looked at.
const reloadCheck = time.Second

// FileCertificate serves a certificate and key from PEM files, read again
// when either file changes, so that a renewed certificate is served
// without a restart. A pair that fails to load (half written, mismatched)
// leaves the previous one in service until the files are right.
type FileCertificate struct {
	certFile, keyFile string
	// OnError, if set, hears of a pair that failed to load.
	OnError func(error)

	mu      sync.Mutex
	cur     *tls.Certificate
	stamp   [2]fileStamp
	checked time.Time
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// LoadFileCertificate reads the pair once; it must load.
func LoadFileCertificate(certFile, keyFile string) (*FileCertificate, error) {
	f := &FileCertificate{certFile: certFile, keyFile: keyFile}
	stamp, err := f.stamps()
	if err != nil {
		return nil, err
	}
	if err := f.load(stamp); err != nil {
		return nil, err
	}
	return f, nil
}

// GetCertificate is tls.Config's callback.
func (f *FileCertificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return f.current(time.Now()), nil
}

func (f *FileCertificate) current(now time.Time) *tls.Certificate {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now.Sub(f.checked) < reloadCheck {
		return f.cur
	}
	f.checked = now
	stamp, err := f.stamps()
	if err == nil && stamp != f.stamp {
		err = f.load(stamp)
	}
	if err != nil && f.OnError != nil {
		f.OnError(err)
	}
	return f.cur
}

func (f *FileCertificate) stamps() ([2]fileStamp, error) {
	var out [2]fileStamp
	for i, p := range []string{f.certFile, f.keyFile} {
		st, err := os.Stat(p)
		if err != nil {
			return out, err
		}
		out[i] = fileStamp{st.ModTime(), st.Size()}
	}
	return out, nil
}

func (f *FileCertificate) load(stamp [2]fileStamp) error {
	c, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return fmt.Errorf("TLS certificate %s with key %s: %w", f.certFile, f.keyFile, err)
	}
	f.cur, f.stamp = &c, stamp
	return nil
}

// ServeTLS is the API's TLS: the files' certificate, TLS 1.2 or later.
func (f *FileCertificate) ServeTLS() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: f.GetCertificate}
}
