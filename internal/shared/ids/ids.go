// Package ids makes the ids of stored objects: UUIDs of version 7, whose
// leading bits are the time of creation in milliseconds. Objects made
// together get neighbouring ids, so a create inserts them at one end of
// the database's primary key index instead of at a random page each (a
// version 4 id): a load balancer with ten members dirtied about ten
// pages of that index per commit, and the checkpoint copied them again.
// Clients see an ordinary UUID (Octavia and Neutron check the form only).
package ids

import "github.com/google/uuid"

// New returns a new id: a version 7 UUID in its canonical form, ordered
// after every id New returned before it in this process.
func New() string {
	id, err := uuid.NewV7()
	if err != nil {
		// NewV7 fails only if the system's random source does.
		panic(err)
	}
	return id.String()
}
