package bgp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/osrg/gobgp/v4/pkg/packet/bfd"
	"golang.org/x/sys/unix"
)

// adminDown is the control packet that takes a BFD session down
// administratively (RFC 5880 6.8.16), which the receiver must not take
// for a failure of its peer.
func adminDown(local, remote uint32, b BFD) ([]byte, error) {
	c := bfdConfig(b)
	h := bfd.BFDHeader{Version: 1, Diagnostic: bfd.DiagnosticAdministrativelyDown, State: bfd.StateAdminDown,
		DetectTimeMultiplier: uint8(c.DetectionMultiplier), MyDiscriminator: local, YourDiscriminator: remote,
		DesiredMinTxInterval: c.DesiredMinimumTxInterval, RequiredMinRxInterval: c.RequiredMinimumReceive}
	return h.MarshalBinary()
}

// sendAdminDown sends it to the peer, from a source port of RFC 5881's
// range and with TTL 255 (single hop: the peer drops anything else),
// three times, as a lost datagram would leave the session to fail.
func sendAdminDown(peer netip.Addr, port int, local, remote uint32, b BFD) error {
	pkt, err := adminDown(local, remote, b)
	if err != nil {
		return err
	}
	var conn net.PacketConn
	lc := net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if peer.Is4() {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TTL, 255)
			} else {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, 255)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	network := "udp4"
	if peer.Is6() {
		network = "udp6"
	}
	for p := 49152 + int(local%16000); ; p++ {
		conn, err = lc.ListenPacket(context.Background(), network, fmt.Sprintf(":%d", p))
		if err == nil || p > 65535 {
			break
		}
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(peer, uint16(port)))
	for range 3 {
		if _, err := conn.WriteTo(pkt, dst); err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}
