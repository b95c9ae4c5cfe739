package l7proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// soOriginalDst is netfilter's SO_ORIGINAL_DST (and IP6T_SO_ORIGINAL_DST,
// the same number at SOL_IPV6): the destination of a connection before
// NAT rewrote it.
const soOriginalDst = 80

// OriginalDst returns the address a TCP client connected to before the
// data plane's NAT steered it to the proxy; for a connection that was not
// translated (or without conntrack) it is the connection's own local
// address.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	local, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("not a TCP connection: %T", c)
	}
	own := local.AddrPort()
	own = netip.AddrPortFrom(own.Addr().Unmap(), own.Port())
	sc, ok := c.(syscall.Conn)
	if !ok {
		return own, nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return own, err
	}
	var dst netip.AddrPort
	var opErr error
	err = raw.Control(func(fd uintptr) {
		dst, opErr = originalDst(int(fd), own.Addr().Is6())
	})
	if err == nil {
		err = opErr
	}
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOPROTOOPT) {
			return own, nil
		}
		return own, err
	}
	return dst, nil
}

func originalDst(fd int, v6 bool) (netip.AddrPort, error) {
	var buf [unix.SizeofSockaddrInet6]byte
	size := uint32(len(buf))
	level := unix.SOL_IP
	if v6 {
		level = unix.SOL_IPV6
	}
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), soOriginalDst,
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 {
		return netip.AddrPort{}, errno
	}
	// A sockaddr_in or sockaddr_in6: family, then the port in network
	// order, then the address.
	port := binary.BigEndian.Uint16(buf[2:4])
	if v6 {
		a := netip.AddrFrom16([16]byte(buf[8:24]))
		return netip.AddrPortFrom(a.Unmap(), port), nil
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(buf[4:8])), port), nil
}
