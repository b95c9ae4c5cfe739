package flows

import "net/netip"

// Counters are what one node counted for one service over an interval:
// connections it admitted, bytes in each direction (IP packets, headers
// included, as the kernel counts them), and connection attempts it
// refused (no backend, allowed_cidrs, connection limit, no local
// backend).
type Counters struct {
	Connections uint64
	BytesIn     uint64
	BytesOut    uint64
	Refused     uint64
}

// Add returns the sum of c and o.
func (c Counters) Add(o Counters) Counters {
	return Counters{Connections: c.Connections + o.Connections, BytesIn: c.BytesIn + o.BytesIn,
		BytesOut: c.BytesOut + o.BytesOut, Refused: c.Refused + o.Refused}
}

// IsZero reports whether nothing was counted.
func (c Counters) IsZero() bool { return c == Counters{} }

// Stats are a node's counters of one service since it last reported, and
// the connections open through it now.
type Stats struct {
	Counters
	Active uint64
	// Members are the counters of the connections sent to each backend
	// (address and port); Refused is zero in them, as a refused
	// connection has no backend.
	Members map[netip.AddrPort]Counters
}

// IsZero reports whether nothing was counted and nothing is open.
func (s Stats) IsZero() bool { return s.Counters.IsZero() && s.Active == 0 && len(s.Members) == 0 }

// AddMembers returns the sum of two members' counters, by backend (nil
// when both are empty).
func AddMembers(a, b map[netip.AddrPort]Counters) map[netip.AddrPort]Counters {
	if len(a)+len(b) == 0 {
		return nil
	}
	out := make(map[netip.AddrPort]Counters, len(a)+len(b))
	for k, c := range a {
		out[k] = c
	}
	for k, c := range b {
		out[k] = out[k].Add(c)
	}
	return out
}
