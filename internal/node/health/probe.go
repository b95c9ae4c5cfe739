// Package health runs the health checks of Octavia's monitor types from
// an agent's node: one probe per member at the monitor's delay, a
// per-member state machine with Octavia's max_retries / max_retries_down,
// and transitions (never every probe) out to the caller. docs/health.md.
package health

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Target is what one probe checks.
type Target struct {
	Address netip.Addr
	Port    uint16
	Type    string // TCP, HTTP, HTTPS, TLS-HELLO, UDP-CONNECT, PING
	Timeout time.Duration
	// HTTP and HTTPS.
	Method        string // default GET
	Path          string // default /
	ExpectedCodes string // "200", "200,202", "200-204"; default 200
	HTTPVersion   string // "1.0" or "1.1" (default 1.0, as Octavia)
	DomainName    string // Host header, HTTP/1.1 only
}

// Supported reports whether a monitor type can be probed here.
func Supported(typ string) error {
	if _, ok := flows.ParseMonitorType(typ); ok {
		return nil
	}
	if typ == "SCTP" {
		return errors.New("SCTP health monitors cannot be probed: this kernel has no SCTP sockets")
	}
	return fmt.Errorf("unknown health monitor type %q", typ)
}

// Probe runs one check; nil means the member is up.
func Probe(ctx context.Context, t Target) error {
	if t.Timeout <= 0 {
		t.Timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	addr := netip.AddrPortFrom(t.Address, t.Port).String()
	var d net.Dialer
	switch t.Type {
	case "TCP":
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	case "HTTP", "HTTPS":
		return probeHTTP(ctx, t, addr)
	case "TLS-HELLO":
		c, err := (&tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("TLS handshake: %w", err)
		}
		return c.Close()
	case "UDP-CONNECT":
		return probeUDP(ctx, addr)
	case "PING":
		return probePing(ctx, t.Address)
	}
	return Supported(t.Type)
}

// probeHTTP sends one request, in the HTTP version the monitor names
// (1.0 by default, as Octavia's amphora), and checks the status against
// the expected codes. Redirects are not followed and certificates not
// verified, as in the amphora (haproxy "check-ssl verify none").
func probeHTTP(ctx context.Context, t Target, addr string) error {
	codes, err := ParseExpectedCodes(t.ExpectedCodes)
	if err != nil {
		return err
	}
	method := orDefault(t.Method, http.MethodGet)
	path := orDefault(t.Path, "/")
	var c net.Conn
	if t.Type == "HTTPS" {
		c, err = (&tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}}).DialContext(ctx, "tcp", addr)
	} else {
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	var req strings.Builder
	if t.HTTPVersion == "1.1" {
		fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, path, orDefault(t.DomainName, addr))
	} else {
		fmt.Fprintf(&req, "%s %s HTTP/1.0\r\n", method, path)
	}
	req.WriteString("User-Agent: flowlb-health\r\n\r\n")
	if _, err := io.WriteString(c, req.String()); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		return fmt.Errorf("read response: %w", err)
	}
	resp.Body.Close()
	if !codes(resp.StatusCode) {
		return fmt.Errorf("HTTP status %d, expected %s", resp.StatusCode, orDefault(t.ExpectedCodes, "200"))
	}
	return nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// ParseExpectedCodes reads Octavia's expected_codes: one code, a comma
// list, or a range "200-204".
func ParseExpectedCodes(s string) (func(int) bool, error) {
	if s == "" {
		s = "200"
	}
	if lo, hi, ok := strings.Cut(s, "-"); ok {
		a, err1 := strconv.Atoi(strings.TrimSpace(lo))
		b, err2 := strconv.Atoi(strings.TrimSpace(hi))
		if err1 != nil || err2 != nil || a > b {
			return nil, fmt.Errorf("expected_codes %q: bad range", s)
		}
		return func(c int) bool { return c >= a && c <= b }, nil
	}
	set := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("expected_codes %q: %w", s, err)
		}
		set[c] = true
	}
	return func(c int) bool { return set[c] }, nil
}

// probeUDP is Octavia's UDP-CONNECT: a datagram to the member; an ICMP
// port unreachable (ECONNREFUSED on a connected socket) means down, a
// reply or silence until the timeout means up (UDP services need not
// answer an empty datagram).
func probeUDP(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	if _, err := c.Write([]byte{}); err != nil {
		return err
	}
	_, err = c.Read(make([]byte, 512))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("port unreachable: %w", err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil
	}
	return err
}

var pingSeq atomic.Uint32

// pingFamily is how one family pings: its ICMP sockets (datagram, which
// the kernel allows unprivileged users in net.ipv4.ping_group_range, for
// both families; raw otherwise), its echo types and its ICMP protocol
// number, for parsing replies. The kernel fills in an ICMPv6 checksum
// itself, over the pseudo-header it alone knows.
type pingFamily struct {
	dgram, raw, any string
	echo, reply     icmp.Type
	proto           int
}

var (
	ping4 = pingFamily{dgram: "udp4", raw: "ip4:icmp", any: "0.0.0.0", echo: ipv4.ICMPTypeEcho, reply: ipv4.ICMPTypeEchoReply, proto: 1}
	ping6 = pingFamily{dgram: "udp6", raw: "ip6:ipv6-icmp", any: "::", echo: ipv6.ICMPTypeEchoRequest, reply: ipv6.ICMPTypeEchoReply, proto: 58}
)

func pingFamilyOf(a netip.Addr) pingFamily {
	if a.Is4() {
		return ping4
	}
	return ping6
}

// probePing sends one ICMP (ICMPv6) echo and waits for its reply, on a
// datagram socket when the kernel allows one, else on a raw one.
func probePing(ctx context.Context, a netip.Addr) error {
	f := pingFamilyOf(a)
	dgram := true
	c, err := icmp.ListenPacket(f.dgram, f.any)
	if err != nil {
		dgram = false
		if c, err = icmp.ListenPacket(f.raw, f.any); err != nil {
			return fmt.Errorf("icmp socket: %w", err)
		}
	}
	defer c.Close()
	return ping(ctx, c, dgram, a, f)
}

// ping pings a over c, an ICMP socket of f, datagram or raw.
func ping(ctx context.Context, c *icmp.PacketConn, dgram bool, a netip.Addr, f pingFamily) error {
	id, seq := os.Getpid()&0xffff, int(pingSeq.Add(1)&0xffff)
	msg := icmp.Message{Type: f.echo, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("flowlb")}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return err
	}
	var dst net.Addr = &net.IPAddr{IP: a.AsSlice()}
	if dgram {
		dst = &net.UDPAddr{IP: a.AsSlice()}
	}
	if _, err := c.WriteTo(b, dst); err != nil {
		return err
	}
	deadline, _ := ctx.Deadline()
	_ = c.SetReadDeadline(deadline)
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("no echo reply: %w", err)
		}
		m, err := icmp.ParseMessage(f.proto, buf[:n])
		if err != nil || m.Type != f.reply {
			continue
		}
		echo, ok := m.Body.(*icmp.Echo)
		// Datagram sockets rewrite the id; match the sequence and peer.
		if !ok || echo.Seq != seq || (!dgram && echo.ID != id) || !sameHost(from, a) {
			continue
		}
		return nil
	}
}

func sameHost(from net.Addr, a netip.Addr) bool {
	var ip net.IP
	switch f := from.(type) {
	case *net.IPAddr:
		ip = f.IP
	case *net.UDPAddr:
		ip = f.IP
	}
	got, ok := netip.AddrFromSlice(ip)
	return ok && got.Unmap() == a
}
