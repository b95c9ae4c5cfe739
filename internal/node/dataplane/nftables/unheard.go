package nftables

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// unheardElements is the size of a transaction (in set elements) from
// which the data plane stops hearing nf_tables notifications while it
// commits. With any socket of the namespace in the notification group,
// the kernel builds one notification per element of a transaction and
// holds them all until the commit ends: about 8 KB of unreclaimable
// kernel memory each, so a full load of 30,000 services (about 1.9
// million elements) took 15 GiB at its peak and three times the CPU of
// the same load unheard. The monitor's socket filter drops
// the data plane's own notifications only as they are delivered, after
// they were built. Below this size a change stays heard: its
// notifications cost less than the window's accounting.
const unheardElements = 1024

// flush sends the queued transaction, of about elements set elements.
// A large one is sent with the monitor out of the notification group, so
// that the kernel builds none; the ruleset's generation, read before and
// after, tells whether another process committed while nothing was
// heard, and if so the next check reads everything.
func (d *Dataplane) flush(elements int) error {
	if d.mon == nil || elements < unheardElements {
		return d.conn.Flush()
	}
	before, err := d.probe.generation()
	if err == nil {
		err = d.mon.leave()
	}
	if err != nil {
		// What would go unheard could not be told: heard, as before.
		return d.conn.Flush()
	}
	if d.whileUnheard != nil {
		d.whileUnheard()
	}
	ferr := d.conn.Flush()
	after, aerr := d.probe.generation()
	if jerr := d.mon.join(); jerr != nil {
		// The monitor cannot hear again: it is started anew at the next
		// check, which then reads everything.
		d.monErr = fmt.Errorf("nftables notifications: join again: %w", jerr)
		_ = d.mon.close()
		d.mon, d.needFull = nil, true
		d.wakeDrift()
		return ferr
	}
	rejoined, rerr := d.probe.generation()
	if aerr != nil || rerr != nil || missedUnheard(before, after, rejoined, ferr == nil) {
		d.needFull = true
		d.wakeDrift()
	}
	return ferr
}

// missedUnheard says whether another transaction may have committed
// while notifications were not heard: the generation before leaving the
// group, after the data plane's own transaction (committed or refused)
// and after joining again. Every commit in the namespace moves it by
// one; anything but the data plane's own commit is a change unheard. A
// refused transaction that moved it is taken as another's too.
func missedUnheard(before, after, rejoined uint32, committed bool) bool {
	own := uint32(0)
	if committed {
		own = 1
	}
	return after != before+own || rejoined != after
}

// wakeDrift asks for a check soon (the channel holds one request).
func (d *Dataplane) wakeDrift() {
	if d.drift == nil {
		return
	}
	select {
	case d.drift <- struct{}{}:
	default:
	}
}

// leave takes the monitor's socket out of the notification group: what
// it has queued stays to be read.
func (m *monitor) leave() error { return m.c.LeaveGroup(unix.NFNLGRP_NFTABLES) }

// join puts it back.
func (m *monitor) join() error { return m.c.JoinGroup(unix.NFNLGRP_NFTABLES) }
