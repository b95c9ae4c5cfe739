package lab

// Sockets made in a node's cgroup. The eBPF data plane translates the
// connections of the processes in a node's cgroup (its pods' below it):
// its connect() program runs for a socket of that cgroup, and a socket
// belongs to the cgroup of the task that created it. A test process, or
// `flowlb lab ask`, lives outside every node's cgroup, so in a lab on
// eBPF its connections from a node or a pod would meet nftables instead.
// A socket maker, this binary re-executed into the host's namespace and
// cgroup, creates the sockets of such connections and passes them back
// over a unix socket; the dialer swaps its own new socket for that one
// before it connects (Dialer.Control), so everything else about the dial
// (context, deadlines, the poller) stays Go's.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// socketsEnv marks a re-executed binary as a socket maker; its requests
// arrive on descriptor 3.
const socketsEnv = "FLOWLB_LAB_SOCKETS"

func init() {
	if os.Getenv(socketsEnv) != "1" {
		return
	}
	if err := serveSockets(os.NewFile(3, "sockets")); err != nil {
		fmt.Fprintln(os.Stderr, "sockets:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// A request is the socket(2) arguments, three little-endian int32s; the
// answer is an errno as one, with the socket as SCM_RIGHTS if it is 0.
const sockReqLen = 12

// serveSockets answers requests on f until the other end closes it.
func serveSockets(f *os.File) error {
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return err
	}
	defer c.Close()
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("descriptor 3 is a %T, not a unix socket", c)
	}
	req := make([]byte, sockReqLen)
	for {
		n, _, _, _, err := uc.ReadMsgUnix(req, nil)
		if n == 0 || err != nil {
			return nil // the lab handle is gone
		}
		ans, fd := make([]byte, 4), -1
		if n != sockReqLen {
			binary.LittleEndian.PutUint32(ans, uint32(unix.EINVAL))
		} else {
			fd, err = unix.Socket(int(int32(binary.LittleEndian.Uint32(req))),
				int(int32(binary.LittleEndian.Uint32(req[4:])))|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC,
				int(int32(binary.LittleEndian.Uint32(req[8:]))))
			var errno unix.Errno
			if errors.As(err, &errno) {
				binary.LittleEndian.PutUint32(ans, uint32(errno))
			}
		}
		var oob []byte
		if fd >= 0 {
			oob = unix.UnixRights(fd)
		}
		_, _, err = uc.WriteMsgUnix(ans, oob, nil)
		if fd >= 0 {
			unix.Close(fd)
		}
		if err != nil {
			return err
		}
	}
}

// socketMaker is the lab handle's side of one host's socket maker.
type socketMaker struct {
	mu sync.Mutex
	c  *net.UnixConn // nil until started, or after it failed
}

// start starts the maker unless it runs.
func (m *socketMaker) start(l *Lab, host string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.startLocked(l, host)
}

func (m *socketMaker) startLocked(l *Lab, host string) error {
	if m.c != nil {
		return nil
	}
	var err error
	m.c, err = startSocketMaker(l, host)
	return err
}

// socket asks the maker for a socket; the caller owns the descriptor.
func (m *socketMaker) socket(l *Lab, host string, family, typ, proto int) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// A maker dies with its pod (pod removal kills the namespace's
	// processes): one retry on a fresh one.
	var err error
	for range 2 {
		if err := m.startLocked(l, host); err != nil {
			return -1, err
		}
		var fd int
		var broken bool
		if fd, broken, err = m.ask(family, typ, proto); err == nil || !broken {
			return fd, err // a socket, or the maker's socket(2) failed
		}
		m.c.Close()
		m.c = nil
	}
	return -1, fmt.Errorf("socket maker of %s: %w", host, err)
}

// ask sends one request; broken says the error is the unix socket's
// (the maker is gone), not the maker's socket(2).
func (m *socketMaker) ask(family, typ, proto int) (fd int, broken bool, err error) {
	req := make([]byte, sockReqLen)
	binary.LittleEndian.PutUint32(req, uint32(int32(family)))
	binary.LittleEndian.PutUint32(req[4:], uint32(int32(typ)))
	binary.LittleEndian.PutUint32(req[8:], uint32(int32(proto)))
	if _, _, err := m.c.WriteMsgUnix(req, nil, nil); err != nil {
		return -1, true, err
	}
	ans, oob := make([]byte, 4), make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := m.c.ReadMsgUnix(ans, oob)
	if err != nil {
		return -1, true, err
	}
	if n != len(ans) {
		return -1, true, errors.New("short answer")
	}
	if e := binary.LittleEndian.Uint32(ans); e != 0 {
		return -1, false, os.NewSyscallError("socket", unix.Errno(e))
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, true, fmt.Errorf("answer without a socket (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return -1, true, fmt.Errorf("answer without a socket (%v)", err)
	}
	return fds[0], false, nil
}

// startSocketMaker re-executes this binary as host's socket maker, in the
// host's namespace and cgroup. It is not in the lab's state: it exits when
// the handle's end closes (with this process), and down kills the lab's
// cgroup with it anyway.
func startSocketMaker(l *Lab, host string) (*net.UnixConn, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "sockets"), os.NewFile(uintptr(pair[1]), "sockets")
	defer theirs.Close()
	_, err = spawn(NSName(l.name, host), l.cgroup(host),
		ProcState{Argv: []string{exe}, Env: []string{socketsEnv + "=1"}, Log: l.LogPath(host, "sockets")}, theirs)
	if err != nil {
		ours.Close()
		return nil, err
	}
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

// translated reports whether host's connections are to be made in its
// node's cgroup by a socket maker: a node's or a pod's, in a lab on eBPF,
// unless this process is in the host's cgroup already (`flowlb lab load`
// run with `lab exec`).
func (l *Lab) translated(host string) bool {
	cg := l.cgroup(host)
	if l.Dataplane() != DataplaneEBPF || cg == "" {
		return false
	}
	if kind, _, _, err := ParseHost(host); err != nil || (kind != KindNode && kind != KindPod) {
		return false
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return true
	}
	for line := range strings.Lines(string(own)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			return filepath.Join(cgroup2Root(), p) != cg
		}
	}
	return true
}

// DialControl is the net.Dialer Control that gives the host's dials the
// socket its node's workloads would have: nil where that is the dialing
// process's own (not a node or pod, or a lab on nftables); else it swaps
// the dialer's new socket for one made in the host's cgroup, so that a
// lab on eBPF translates the connection at connect() as a pod's own.
func (h Host) DialControl() func(network, address string, c syscall.RawConn) error {
	if h.lab == nil || !h.lab.translated(h.Name) {
		return nil
	}
	l, host := h.lab, h.Name
	l.makersMu.Lock()
	m := l.makers[host]
	if m == nil {
		m = &socketMaker{}
		if l.makers == nil {
			l.makers = map[string]*socketMaker{}
		}
		l.makers[host] = m
	}
	l.makersMu.Unlock()
	// Now rather than in the first dial, whose time it would count (a
	// load run's first connections); a failure shows again there.
	_ = m.start(l, host)
	return func(network, _ string, c syscall.RawConn) error {
		var family, typ int
		switch network {
		case "tcp4", "udp4":
			family = unix.AF_INET
		case "tcp6", "udp6":
			family = unix.AF_INET6
		default:
			return fmt.Errorf("dial %s from %s: no socket maker for it", network, host)
		}
		typ = unix.SOCK_STREAM
		if network[0] == 'u' {
			typ = unix.SOCK_DGRAM
		}
		fd, err := m.socket(l, host, family, typ, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		var dupErr error
		// The dialer has not connected nor registered its socket with the
		// poller yet: the descriptor number now names the maker's socket.
		if err := c.Control(func(s uintptr) { dupErr = unix.Dup3(fd, int(s), unix.O_CLOEXEC) }); err != nil {
			return err
		}
		return dupErr
	}
}
