package ebpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// What was reported, kept beside the pins. The counters and traffic maps
// only grow and a read reports the growth since the sums last read, so a
// restarted agent needs those sums to report what grew while no agent
// ran, as nftables' read-and-reset counters give it to the next reader.
// Each of the four counting maps has a plain hash map of the same keys
// pinned beside it, holding the sums last reported: written at every
// read for the keys whose sums moved, emptied of the keys the counting
// map drops, and read back by the next agent.
const (
	reportedCounters  = "rep_counters"
	reportedCounters6 = "rep_counters6"
	reportedTraffic   = "rep_traffic"
	reportedTraffic6  = "rep_traffic6"
)

// reportedNames maps each counting map to its reported map.
var reportedNames = map[string]string{
	socklbMapCounters: reportedCounters, socklbMapCounters6: reportedCounters6,
	socklbMapTraffic: reportedTraffic, socklbMapTraffic6: reportedTraffic6,
}

// reported is a counting map's sums last reported: in memory, and with
// a pin directory in its pinned map (nil without one).
type reported[K comparable, V comparable] struct {
	last map[K]V
	m    *ebpf.Map
}

// start is where a counting map's reports begin. Without pins there is
// nothing before this agent. A counting map made anew (had false) holds
// nothing reported: its reported map is made empty. One adopted with its
// reported map takes the sums saved there. One adopted without (pins of
// an agent that kept none) cannot tell: prime says the caller takes what
// it holds now as reported, with a read whose result it drops.
func (r *reported[K, V]) start(counts *ebpf.Map, pinDir, name string, had bool) (prime bool, err error) {
	r.last = map[K]V{}
	if pinDir == "" {
		return false, nil
	}
	pin := filepath.Join(pinDir, name)
	if !had {
		if err := os.Remove(pin); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, err
		}
	}
	_, statErr := os.Stat(pin)
	adopted := statErr == nil
	spec := &ebpf.MapSpec{Name: name, Type: ebpf.Hash, KeySize: counts.KeySize(), ValueSize: counts.ValueSize(),
		MaxEntries: counts.MaxEntries(), Pinning: ebpf.PinByName}
	r.m, err = ebpf.NewMapWithOptions(spec, ebpf.MapOptions{PinPath: pinDir})
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		// Another version's shape: its sums cannot be read as these.
		if err := os.Remove(pin); err != nil {
			return false, err
		}
		adopted = false
		r.m, err = ebpf.NewMapWithOptions(spec, ebpf.MapOptions{PinPath: pinDir})
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", name, err)
	}
	if !adopted {
		return had, nil
	}
	var k K
	var v V
	it := r.m.Iterate()
	for it.Next(&k, &v) {
		r.last[k] = v
	}
	if err := it.Err(); err != nil {
		return false, fmt.Errorf("read %s: %w", name, err)
	}
	return false, nil
}

// save records the sums of a read that moved.
func (r *reported[K, V]) save(keys []K, vals []V) error {
	if r.m == nil || len(keys) == 0 {
		return nil
	}
	if _, err := r.m.BatchUpdate(keys, vals, nil); err != nil {
		return fmt.Errorf("save %d reported sums: %w", len(keys), err)
	}
	return nil
}

// forget drops keys the counting map no longer has.
func (r *reported[K, V]) forget(keys []K) error {
	var errs []error
	for _, k := range keys {
		delete(r.last, k)
		if r.m == nil {
			continue
		}
		// One by one: a batch stops at the first key it lacks.
		if err := r.m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pinned reports which of the counting maps are pinned in dir now.
func pinnedCounting(dir string) map[string]bool {
	had := map[string]bool{}
	if dir == "" {
		return had
	}
	for name := range reportedNames {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			had[name] = true
		}
	}
	return had
}
