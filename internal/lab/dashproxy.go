package lab

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcDashboardProxy is the fabric's process that forwards a loopback
// port of the machine to a flowlb server's dashboard.
const ProcDashboardProxy = "dashboard-proxy"

// StartDashboardProxy binds a loopback port in the caller's namespace
// and runs argv (flowlb lab dashboard-proxy) in the fabric namespace to
// serve it: a proxy to the dashboard of the flowlb API at target
// (https, trusting caFile), so that the machine's browser opens it at
// the URL returned, in plain HTTP on loopback. `lab down` stops it.
func (l *Lab) StartDashboardProxy(argv []string, target, caFile string) (string, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		return "", err
	}
	defer f.Close()
	argv = append(append([]string{}, argv...), "--listen-fd", "3", "--target", target, "--ca-file", caFile)
	if _, err := l.startProc(HostFabric, ProcDashboardProxy, ProcState{Argv: argv}, f); err != nil {
		return "", err
	}
	return "http://" + ln.Addr().String() + "/dashboard/", nil
}

// ServeDashboardProxy serves DashboardProxy on the inherited listening
// socket fd until ctx ends.
func ServeDashboardProxy(ctx context.Context, fd int, target, caFile string) error {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("--target %q: want https://host:port", target)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return fmt.Errorf("%s: no certificate", caFile)
	}
	f := os.NewFile(uintptr(fd), "listen-fd-"+strconv.Itoa(fd))
	if f == nil {
		return fmt.Errorf("--listen-fd %d: not open", fd)
	}
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("--listen-fd %d: %w", fd, err)
	}
	rt := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ResponseHeaderTimeout: 30 * time.Second}
	srv := &http.Server{Handler: DashboardProxy(u, rt), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// DashboardProxy forwards /dashboard and what is under it to the API at
// target through rt, and sends / there; nothing else of the API is
// reachable through it.
func DashboardProxy(target *url.URL, rt http.RoundTripper) http.Handler {
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport: rt,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/":
			http.Redirect(w, r, "/dashboard/", http.StatusFound)
		case r.URL.Path == "/dashboard" || strings.HasPrefix(r.URL.Path, "/dashboard/"):
			rp.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}
