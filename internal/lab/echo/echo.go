// Package echo is the lab's pod server: it answers on TCP, UDP and HTTP
// with its name, the local address the connection reached and the peer
// address it saw, so tests can tell which backend answered and whether
// the client's real address survived the path.
package echo

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pires/go-proxyproto"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Config of an echo server.
type Config struct {
	Name string // answered in every reply
	Bind string // listen address, default all of both families (""), e.g. "127.0.0.1" in unit tests
	TCP  []int  // line protocol: every line read gets one reply line
	UDP  []int  // every datagram gets one reply datagram
	HTTP []int  // every request gets the reply line as body
	// ProxyHTTP ports serve HTTP after a PROXY protocol header (v1 or
	// v2, required), and answer with the addresses it names: the
	// members of PROXY and PROXYV2 pools.
	ProxyHTTP []int
	// HTTPS ports serve HTTP over TLS (h2 or HTTP/1.1, by ALPN) with a
	// self-signed certificate made at start, and say in their answer's
	// headers the HTTP version and the client certificate's CN: the
	// members of pools with tls_enabled.
	HTTPS []int
	// Auto ports speak both TCP protocols: a connection whose first line
	// is an HTTP request line is served as HTTP, any other as the line
	// protocol. Kubernetes pods in the lab listen this way on their
	// container ports, since a port number does not say which one a
	// client (or a probe) will speak.
	Auto []int
	// HealthFile, if set and present, makes HTTP answer 500 (to fail
	// health checks without stopping the server).
	HealthFile string
	// ReadyFile, if set, is created once every socket is bound.
	ReadyFile string
	Log       *slog.Logger
}

// Reply is one parsed answer.
type Reply struct {
	Pod  string
	Addr string // local ip:port the server saw
	Peer string // remote ip:port the server saw
}

// String is the wire form: "pod=NAME addr=IP:PORT peer=IP:PORT".
func (r Reply) String() string {
	return "pod=" + r.Pod + " addr=" + r.Addr + " peer=" + r.Peer
}

// Parse reads a reply line (with or without a trailing newline).
func Parse(line string) (Reply, error) {
	var r Reply
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		switch k {
		case "pod":
			r.Pod = v
		case "addr":
			r.Addr = v
		case "peer":
			r.Peer = v
		}
	}
	if r.Pod == "" || r.Addr == "" || r.Peer == "" {
		return Reply{}, fmt.Errorf("not an echo reply: %q", line)
	}
	return r, nil
}

// Bound listeners, so callers (tests) can learn ports chosen with 0.
type Server struct {
	cfg  Config
	tcp  []net.Listener
	http []net.Listener
	// proxied are the ProxyHTTP ports' listeners.
	proxied []net.Listener
	https   []net.Listener
	auto    []net.Listener
	udp     []net.PacketConn
}

// Listen binds every socket; Serve then answers on them. Without Bind,
// each port is bound in both families, as two sockets (IPv6 only on the
// IPv6 one), so that the replies name plain IPv4 addresses.
func Listen(cfg Config) (*Server, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	s := &Server{cfg: cfg}
	for _, set := range []struct {
		ports []int
		into  *[]net.Listener
	}{{cfg.TCP, &s.tcp}, {cfg.HTTP, &s.http}, {cfg.ProxyHTTP, &s.proxied}, {cfg.HTTPS, &s.https}, {cfg.Auto, &s.auto}} {
		for _, p := range set.ports {
			err := cfg.bind(p, func(network, addr string) (int, error) {
				ln, err := net.Listen("tcp"+network, addr)
				if err != nil {
					return 0, err
				}
				*set.into = append(*set.into, ln)
				return ln.Addr().(*net.TCPAddr).Port, nil
			})
			if err != nil {
				s.Close()
				return nil, err
			}
		}
	}
	for _, p := range cfg.UDP {
		err := cfg.bind(p, func(network, addr string) (int, error) {
			pc, err := net.ListenPacket("udp"+network, addr)
			if err != nil {
				return 0, err
			}
			s.udp = append(s.udp, pc)
			return pc.LocalAddr().(*net.UDPAddr).Port, nil
		})
		if err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// bind calls listen for port p on Bind or, without one, on the IPv4 and
// then the IPv6 wildcard; the IPv6 socket takes the port the IPv4 one
// got, so that port 0 ends up as one port in both. network is "" (the
// family of Bind), "4" or "6".
func (cfg Config) bind(p int, listen func(network, addr string) (int, error)) error {
	if cfg.Bind != "" {
		_, err := listen("", net.JoinHostPort(cfg.Bind, strconv.Itoa(p)))
		return err
	}
	port, err := listen("4", net.JoinHostPort("0.0.0.0", strconv.Itoa(p)))
	if err != nil {
		return err
	}
	_, err = listen("6", net.JoinHostPort("::", strconv.Itoa(port)))
	return err
}

// TCPAddrs, UDPAddrs and HTTPAddrs are the bound addresses.
func (s *Server) TCPAddrs() []string  { return addrs(s.tcp) }
func (s *Server) HTTPAddrs() []string { return addrs(s.http) }

// ProxyHTTPAddrs are the bound addresses of the ProxyHTTP ports.
func (s *Server) ProxyHTTPAddrs() []string { return addrs(s.proxied) }

// HTTPSAddrs are the bound addresses of the HTTPS ports.
func (s *Server) HTTPSAddrs() []string { return addrs(s.https) }
func (s *Server) AutoAddrs() []string  { return addrs(s.auto) }
func (s *Server) UDPAddrs() []string {
	var out []string
	for _, pc := range s.udp {
		out = append(out, pc.LocalAddr().String())
	}
	return out
}

func addrs(ls []net.Listener) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Addr().String())
	}
	return out
}

// Close closes every socket.
func (s *Server) Close() {
	for _, l := range s.tcp {
		l.Close()
	}
	for _, l := range s.http {
		l.Close()
	}
	for _, l := range s.proxied {
		l.Close()
	}
	for _, l := range s.https {
		l.Close()
	}
	for _, l := range s.auto {
		l.Close()
	}
	for _, pc := range s.udp {
		pc.Close()
	}
}

// Run binds and serves until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	s, err := Listen(cfg)
	if err != nil {
		return err
	}
	return s.Serve(ctx)
}

// Serve answers until ctx ends, then closes the sockets.
func (s *Server) Serve(ctx context.Context) error {
	if s.cfg.ReadyFile != "" {
		if err := os.WriteFile(s.cfg.ReadyFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			s.Close()
			return err
		}
	}
	var wg sync.WaitGroup
	for _, ln := range s.tcp {
		wg.Go(func() { s.serveTCP(ln) })
	}
	var servers []*http.Server
	for _, ln := range s.http {
		hs := &http.Server{Handler: http.HandlerFunc(s.serveHTTP), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second}
		servers = append(servers, hs)
		wg.Go(func() { _ = hs.Serve(ln) })
	}
	for _, ln := range s.proxied {
		hs := &http.Server{Handler: http.HandlerFunc(s.serveHTTP), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second}
		servers = append(servers, hs)
		pl := &proxyproto.Listener{Listener: ln, ReadHeaderTimeout: 10 * time.Second,
			ConnPolicy: func(proxyproto.ConnPolicyOptions) (proxyproto.Policy, error) { return proxyproto.REQUIRE, nil }}
		wg.Go(func() { _ = hs.Serve(pl) })
	}
	if len(s.https) > 0 {
		cert, err := selfSigned(s.cfg.Name)
		if err != nil {
			s.Close()
			return err
		}
		for _, ln := range s.https {
			hs := &http.Server{Handler: http.HandlerFunc(s.serveHTTP), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second,
				TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert}}
			servers = append(servers, hs)
			wg.Go(func() { _ = hs.ServeTLS(ln, "", "") })
		}
	}
	for _, ln := range s.auto {
		hl := newConnListener(ln.Addr())
		hs := &http.Server{Handler: http.HandlerFunc(s.serveHTTP), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second}
		servers = append(servers, hs)
		wg.Go(func() { _ = hs.Serve(hl) })
		wg.Go(func() { s.serveAuto(ln, hl); hl.Close() })
	}
	for _, pc := range s.udp {
		wg.Go(func() { s.serveUDP(pc) })
	}
	<-ctx.Done()
	for _, hs := range servers {
		hs.Close()
	}
	s.Close()
	wg.Wait()
	return nil
}

func (s *Server) reply(local, peer net.Addr) string {
	return Reply{Pod: s.cfg.Name, Addr: local.String(), Peer: peer.String()}.String() + "\n"
}

// accept calls fn for every accepted connection, in its own goroutine,
// until the listener is closed.
func accept(ln net.Listener, fn func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of fds or similar: back off instead of spinning.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go fn(c)
	}
}

func (s *Server) serveTCP(ln net.Listener) {
	accept(ln, func(c net.Conn) {
		defer c.Close()
		s.lines(c, bufio.NewReader(c), false)
	})
}

// lines answers one reply line per line read from r; if first, a line
// was already read (by serveAuto) and is answered at once.
func (s *Server) lines(c net.Conn, r *bufio.Reader, first bool) {
	line := []byte(s.reply(c.LocalAddr(), c.RemoteAddr()))
	if first {
		if _, err := c.Write(line); err != nil {
			return
		}
	}
	for {
		// An idle client must not pin a goroutine forever.
		_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
		if _, err := r.ReadString('\n'); err != nil {
			return
		}
		if _, err := c.Write(line); err != nil {
			return
		}
	}
}

// serveAuto reads the first line of every connection and hands it to
// the HTTP server (through hl) if it is an HTTP/1 request line, or
// answers it with the line protocol otherwise.
func (s *Server) serveAuto(ln net.Listener, hl *connListener) {
	accept(ln, func(c net.Conn) {
		r := bufio.NewReader(c)
		_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
		// Wait for the first line (or a full buffer): peek what has
		// arrived, and one byte more while it holds no newline.
		first, err := r.Peek(1)
		for err == nil {
			first, _ = r.Peek(r.Buffered())
			if bytesHasNewline(first) || len(first) >= r.Size() {
				break
			}
			_, err = r.Peek(len(first) + 1)
		}
		if err != nil && len(first) == 0 {
			c.Close()
			return
		}
		_ = c.SetReadDeadline(time.Time{})
		if IsHTTPRequestLine(string(first)) {
			if !hl.put(&bufferedConn{Conn: c, r: r}) {
				c.Close()
			}
			return
		}
		defer c.Close()
		if _, err := r.ReadString('\n'); err != nil {
			return
		}
		s.lines(c, r, true)
	})
}

func bytesHasNewline(b []byte) bool {
	for _, x := range b {
		if x == '\n' {
			return true
		}
	}
	return false
}

// IsHTTPRequestLine reports whether s starts with an HTTP/1 request line:
// "METHOD SP target SP HTTP/1.x".
func IsHTTPRequestLine(s string) bool {
	line, _, _ := strings.Cut(s, "\n")
	line = strings.TrimSuffix(line, "\r")
	f := strings.Split(line, " ")
	if len(f) != 3 || f[0] == "" || f[1] == "" || !strings.HasPrefix(f[2], "HTTP/1.") {
		return false
	}
	for _, r := range f[0] {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}

// bufferedConn is a connection whose first bytes were already read into r.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// connListener is a net.Listener fed with connections by serveAuto.
type connListener struct {
	addr   net.Addr
	ch     chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, ch: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *connListener) put(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.closed:
		return false
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	peer, err := net.ResolveTCPAddr("tcp", r.RemoteAddr)
	if local == nil || err != nil {
		http.Error(w, "cannot tell addresses", http.StatusInternalServerError)
		return
	}
	line := s.reply(local, peer)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Flowlb-Pod", s.cfg.Name)
	// What a proxy in the path said of the client, for the tests of
	// L7 listeners' insert_headers.
	if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
		w.Header().Set("X-Flowlb-Forwarded-For", strings.Join(xff, ", "))
	}
	// How a proxy reached an HTTPS port: the HTTP version and the
	// certificate it presented.
	if r.TLS != nil {
		w.Header().Set("X-Flowlb-Proto", r.Proto)
		if len(r.TLS.PeerCertificates) > 0 {
			w.Header().Set("X-Flowlb-Client-CN", r.TLS.PeerCertificates[0].Subject.CommonName)
		}
	}
	if s.cfg.HealthFile != "" {
		if _, err := os.Stat(s.cfg.HealthFile); err == nil {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte("unhealthy " + line))
			return
		}
	}
	_, _ = w.Write([]byte(line))
	// ?pad=N adds N bytes after the reply line: answers of a given size
	// for the benchmarks.
	if n, err := strconv.Atoi(r.URL.Query().Get("pad")); err == nil && n > 0 && n <= maxPad {
		_, _ = w.Write(padding[:n])
	}
}

// selfSigned is a new self-signed certificate naming the server.
func selfSigned(name string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// maxPad bounds ?pad; padding holds that many bytes.
const maxPad = 1 << 20

var padding = []byte(strings.Repeat("x", maxPad))

// serveUDP reads the destination address of each datagram (IP_PKTINFO,
// IPV6_PKTINFO) so a socket bound to the wildcard reports, and answers
// from, the address the client actually sent to.
func (s *Server) serveUDP(pc net.PacketConn) {
	port := pc.LocalAddr().(*net.UDPAddr).Port
	read, write := pktinfo(pc)
	buf := make([]byte, 64*1024)
	for {
		dst, src, err := read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		local := pc.LocalAddr()
		if dst != nil {
			local = &net.UDPAddr{IP: dst, Port: port}
		}
		_ = write([]byte(s.reply(local, src)), dst, src)
	}
}

// pktinfo returns, for pc's family, a read that also returns the
// datagram's destination address (nil when the kernel did not say) and a
// write that sends from the given source (nil: the kernel's choice).
func pktinfo(pc net.PacketConn) (read func([]byte) (dst net.IP, src net.Addr, err error), write func(b []byte, from net.IP, to net.Addr) error) {
	if pc.LocalAddr().(*net.UDPAddr).IP.To4() != nil {
		p := ipv4.NewPacketConn(pc)
		ok := p.SetControlMessage(ipv4.FlagDst, true) == nil
		return func(b []byte) (net.IP, net.Addr, error) {
				_, cm, src, err := p.ReadFrom(b)
				if ok && cm != nil {
					return cm.Dst, src, err
				}
				return nil, src, err
			}, func(b []byte, from net.IP, to net.Addr) error {
				var cm *ipv4.ControlMessage
				if from != nil {
					cm = &ipv4.ControlMessage{Src: from}
				}
				_, err := p.WriteTo(b, cm, to)
				return err
			}
	}
	p := ipv6.NewPacketConn(pc)
	ok := p.SetControlMessage(ipv6.FlagDst, true) == nil
	return func(b []byte) (net.IP, net.Addr, error) {
			_, cm, src, err := p.ReadFrom(b)
			if ok && cm != nil {
				return cm.Dst, src, err
			}
			return nil, src, err
		}, func(b []byte, from net.IP, to net.Addr) error {
			var cm *ipv6.ControlMessage
			if from != nil {
				cm = &ipv6.ControlMessage{Src: from}
			}
			_, err := p.WriteTo(b, cm, to)
			return err
		}
}
