package ebpf

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Lookup reads k's entry from the services maps pinned in pinDir,
// read-only: nil when the maps do not hold k (the programs pass such a
// connect() on untouched, to the nftables rules).
func Lookup(pinDir string, k flows.Key) (*Service, error) {
	if protos[k.Protocol] == 0 || !k.VIP.Is4() && (!k.VIP.Is6() || k.VIP.Is4In6()) {
		// No map can hold k; but a wrong pinDir is still an error.
		if _, err := os.Stat(filepath.Join(pinDir, socklbMapServices)); err != nil {
			return nil, fmt.Errorf("open the pinned map: %w", err)
		}
		return nil, nil
	}
	if k.VIP.Is4() {
		v, ok, err := lookup[svcKey, svcVal](filepath.Join(pinDir, socklbMapServices), encodeKey(k))
		if !ok {
			return nil, err
		}
		s := decode(encodeKey(k), v)
		return &s, nil
	}
	v, ok, err := lookup[svcKey6, svcVal6](filepath.Join(pinDir, socklbMapServices6), encodeKey6(k))
	if !ok {
		return nil, err
	}
	s := decode6(encodeKey6(k), v)
	return &s, nil
}

func lookup[K, V any](pin string, k K) (v V, ok bool, err error) {
	m, err := ebpf.LoadPinnedMap(pin, &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return v, false, fmt.Errorf("open the pinned map: %w", err)
	}
	defer m.Close()
	switch err := m.Lookup(&k, &v); {
	case errors.Is(err, ebpf.ErrKeyNotExist):
		return v, false, nil
	case err != nil:
		return v, false, fmt.Errorf("look up the service: %w", err)
	}
	return v, true, nil
}

// Trace writes what the programs whose maps are pinned in pinDir do
// with a connection to k: agent trace --bpf-pin-dir.
func Trace(w io.Writer, pinDir string, k flows.Key) error {
	s, err := Lookup(pinDir, k)
	if err != nil {
		return err
	}
	WriteTrace(w, k, s)
	return nil
}

// choices says, per algorithm, what picks the slot of a connection;
// none of it is known before the socket exists, so a trace shows the
// whole table.
var choices = map[flows.Algorithm]string{
	flows.RoundRobin: "a random slot per connect(); an unconnected UDP socket's datagrams keep one slot per socket (its cookie's hash)",
	flows.SourceIP:   "the slot of the client's network namespace (its cookie's hash): one backend per pod or for the host, not per source address",
	flows.SourceIPPort: "the slot of the client's socket (its cookie's hash: the source port is not chosen yet at connect()); " +
		"one backend per socket",
}

// WriteTrace explains what the socket programs do with a connection to
// k from a socket of the cgroup, given k's services map entry s (nil:
// none): refused, not translated, or sent to a backend of the slot
// table, each with its share of the slots.
func WriteTrace(w io.Writer, k flows.Key, s *Service) {
	head := fmt.Sprintf("%s %s", netip.AddrPortFrom(k.VIP, k.Port), k.Protocol)
	switch {
	case s == nil:
		fmt.Fprintf(w, "%s: not in the eBPF maps (nftables serves it): connect() keeps the VIP; trace it without --bpf-pin-dir\n", head)
		return
	case s.Refuse:
		fmt.Fprintf(w, "%s: refused: no usable backend (connect() and sendmsg() fail with ECONNREFUSED)\n", head)
		return
	}
	fmt.Fprintf(w, "%s: %s, translated at connect() to the backend of one of %d slots:\n", head, s.Algorithm, Slots)
	fmt.Fprintf(w, "  chosen by %s\n", choices[s.Algorithm])
	if s.Persistence > 0 {
		fmt.Fprintf(w, "  SOURCE_IP persistence %s: a client (its network namespace) that used a backend of this service within that time, "+
			"and whose backend still has slots, keeps it\n", s.Persistence)
	}
	for _, b := range sortedBackends(s) {
		fmt.Fprintf(w, "  %s %d/%d slots (%.1f%%)\n", b, s.Backends[b], Slots, 100*float64(s.Backends[b])/Slots)
	}
}
