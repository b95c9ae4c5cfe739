package flows

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
}
