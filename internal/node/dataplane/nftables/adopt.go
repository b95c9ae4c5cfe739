package nftables

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// adopt takes over a table left by an earlier agent: it reads every
// service's elements back as its footprint, so that the first Sync changes
// only what differs and no connection, established or new, notices the
// restart. A table of another layout is not adopted (it is rebuilt).
func (d *plane) adopt(uncounted bool) (bool, error) {
	t, err := d.conn.ListTableOfFamily(tableName, d.fam.table)
	if err != nil {
		return false, nil // no table yet
	}
	sets, err := d.conn.GetSets(t)
	if err != nil {
		return false, fmt.Errorf("read sets: %w", err)
	}
	upgrade := upgradableFrom(t, sets)
	if (!sameLayout(t, sets) && upgrade == "") || hasSet(sets, uncountedMarker) != uncounted {
		return false, nil
	}
	programmed, ok, err := d.readFootprints(t)
	if err != nil || !ok {
		return false, err
	}
	chains, err := d.readClassChains()
	if err != nil {
		return false, err
	}
	if upgrade != "" {
		if err := d.upgradeRules(t, upgrade, chains, uncounted); err != nil {
			return false, err
		}
		sets = append(sets, &nftables.Set{Table: t, Name: layoutMarker, KeyType: nftables.TypeInteger})
	}
	d.table, d.sets = t, setsByName(sets)
	d.programmed, d.chains = programmed, chains
	for k, e := range programmed {
		for a := range e.fp.backends(d.fam) {
			d.refs[a]++
		}
		if e.fp.own() {
			d.vipRefs[k.VIP]++
		}
		for _, c := range e.fp.chains() {
			d.chainRefs[c]++
		}
	}
	return true, nil
}

// sameLayout reports whether the kernel's sets are the ones this code
// declares (the layout marker among them).
func sameLayout(t *nftables.Table, sets []*nftables.Set) bool {
	byName := setsByName(sets)
	for _, want := range setSpecs(t) {
		got := byName[want.Name]
		// The library does not decode a verdict map's key type.
		sameKey := got != nil && (got.KeyType.Bytes == want.KeyType.Bytes || want.DataType == nftables.TypeVerdict)
		if !sameKey || got.IsMap != want.IsMap || got.Interval != want.Interval || got.Dynamic != want.Dynamic {
			return false
		}
	}
	return true
}

// upgradableFrom is the marker of an earlier layout the table has whose
// sets are this layout's ("": none).
func upgradableFrom(t *nftables.Table, sets []*nftables.Set) string {
	for _, old := range rulesOnlyUpgrades {
		if !hasSet(sets, old) {
			continue
		}
		renamed := slices.Clone(sets)
		renamed = append(renamed, &nftables.Set{Table: t, Name: layoutMarker, KeyType: nftables.TypeInteger})
		if sameLayout(t, renamed) {
			return old
		}
	}
	return ""
}

// upgradeRules replaces the rules of a table of an earlier layout with
// this layout's, in one transaction: each chain is flushed and refilled
// (the base chains and the table's class chains), and the layout marker
// is renamed. The sets and their elements stay as they are, and a packet
// meets either the old rules or the new.
func (d *plane) upgradeRules(t *nftables.Table, from string, classChains map[string]bool, uncounted bool) error {
	sc := schema{fam: d.fam, table: t, sets: setsByName(setSpecs(t))}
	specs := baseChains(sc, !uncounted)
	for name := range classChains {
		spec, err := classChain(name, sc)
		if err != nil {
			return err
		}
		specs = append(specs, spec)
	}
	for _, spec := range specs {
		ch := &nftables.Chain{Name: spec.chain.Name, Table: t}
		d.conn.FlushChain(ch)
		for _, r := range spec.rules {
			d.conn.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: r.exprs})
		}
	}
	d.conn.DelSet(&nftables.Set{Table: t, Name: from})
	if err := d.conn.AddSet(&nftables.Set{Table: t, Name: layoutMarker, KeyType: nftables.TypeInteger}, nil); err != nil {
		return fmt.Errorf("add set %s: %w", layoutMarker, err)
	}
	if err := d.conn.Flush(); err != nil {
		return fmt.Errorf("upgrade table %s %s from %s: %w", d.fam.name, tableName, from, err)
	}
	return nil
}

func hasSet(sets []*nftables.Set, name string) bool {
	_, ok := setsByName(sets)[name]
	return ok
}

// readFootprints reads every service's elements back; false when one is
// not of this layout. The sets the packet path fills (lazySets) are not
// read: a service's elements in them are the ones its key and the
// backends its slots name may have (addCounters), made yet or not.
func (d *plane) readFootprints(t *nftables.Table) (map[flows.Key]entry, bool, error) {
	specs := setsByName(setSpecs(t))
	programmed := map[flows.Key]entry{}
	for _, name := range serviceSets {
		if isLazySet(name) {
			continue
		}
		// Read with the declared types: the library does not decode a
		// verdict map's data type, and so its verdicts, from the kernel.
		els, err := d.conn.GetSetElements(specs[name])
		if err != nil {
			return nil, false, fmt.Errorf("read %s: %w", name, err)
		}
		for _, el := range els {
			k, e, ok := d.fam.readElement(specs[name], el)
			if !ok {
				return nil, false, nil
			}
			en := programmed[k]
			if en.fp == nil {
				en.fp = footprint{}
			}
			en.fp.add(e)
			programmed[k] = en
		}
	}
	for k, en := range programmed {
		backends := map[backend]bool{}
		for _, e := range en.fp {
			if e.set == slotsMap {
				be := d.fam.parseBackend(e.val)
				backends[backend{be.addr, be.port}] = true
			}
		}
		en.fp.addCounters(key(k), backends)
	}
	return programmed, true, nil
}

// readElement decodes an element of a per-service set read back from the
// kernel.
func (f *family) readElement(spec *nftables.Set, el nftables.SetElement) (flows.Key, elem, bool) {
	k, ok := f.parseKey(el.Key)
	if !ok {
		return k, elem{}, false
	}
	e := elem{set: spec.Name, key: el.Key, val: el.Val}
	if len(el.KeyEnd) > 0 {
		e.keyEnd = el.KeyEnd
	}
	if spec.DataType == nftables.TypeVerdict {
		if _, e.jump = decodeVerdict(el.Val); e.jump == "" {
			return k, elem{}, false
		}
	}
	if spec.Name != slotsMap {
		e.val = nil
	} else if len(e.val) < int(f.backendLen()) {
		return k, elem{}, false
	}
	return k, e, true
}

// readClassChains lists the persistence and limit chains of the table.
func (d *plane) readClassChains() (map[string]bool, error) {
	chains, err := d.conn.ListChainsOfTableFamily(d.fam.table)
	if err != nil {
		return nil, fmt.Errorf("read chains: %w", err)
	}
	out := map[string]bool{}
	for _, c := range chains {
		if c.Table.Name == tableName && (strings.HasPrefix(c.Name, persistPrefix) || strings.HasPrefix(c.Name, limitPrefix)) {
			out[c.Name] = true
		}
	}
	return out, nil
}

// decodeVerdict decodes a verdict map element's data as the kernel
// returns it (NFTA_VERDICT_CODE, NFTA_VERDICT_CHAIN), which the library
// leaves as raw attributes.
func decodeVerdict(b []byte) (kind int32, chain string) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return 0, ""
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_VERDICT_CODE:
			kind = int32(ad.Uint32())
		case unix.NFTA_VERDICT_CHAIN:
			chain = ad.String()
		}
	}
	if ad.Err() != nil {
		return 0, ""
	}
	return kind, chain
}
