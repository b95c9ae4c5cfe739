package lab

// Topology zones: nodes are dealt into zones round-robin.

// DefaultZones is the number of zones of a lab that names none.
const DefaultZones = 3

// Zone is the topology zone of node i when nodes are dealt into zones
// zones round-robin: zone-a, zone-b, ...
func Zone(i, zones int) string {
	if zones < 1 {
		zones = 1
	}
	return "zone-" + string(rune('a'+(i-1)%zones))
}

// Zones is the number of zones the lab's nodes are dealt into.
func (l *Lab) Zones() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st.Zones < 1 {
		return DefaultZones // a lab from before zones were recorded
	}
	return l.st.Zones
}

// Zone is the topology zone of node i.
func (l *Lab) Zone(i int) string { return Zone(i, l.Zones()) }
