package nftables

import (
	"fmt"
	"strings"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/flows"
)

// adopt takes over a table left by an earlier agent: it reads every
// service's elements back as its footprint, so that the first Sync changes
// only what differs and no connection, established or new, notices the
// restart. A table of another layout is not adopted (it is rebuilt).
func (d *Dataplane) adopt() (bool, error) {
	t, err := d.conn.ListTableOfFamily(tableName, nftables.TableFamilyIPv4)
	if err != nil {
		return false, nil // no table yet
	}
	sets, err := d.conn.GetSets(t)
	if err != nil {
		return false, fmt.Errorf("read sets: %w", err)
	}
	byName := map[string]*nftables.Set{}
	for _, s := range sets {
		byName[s.Name] = s
	}
	for _, want := range setSpecs(t) {
		got := byName[want.Name]
		// The library does not decode a verdict map's key type.
		sameKey := got != nil && (got.KeyType.Bytes == want.KeyType.Bytes || want.DataType == nftables.TypeVerdict)
		if !sameKey || got.IsMap != want.IsMap || got.Interval != want.Interval {
			return false, nil
		}
	}
	specs := map[string]*nftables.Set{}
	for _, s := range setSpecs(t) {
		specs[s.Name] = s
	}
	programmed := map[flows.Key]entry{}
	for _, name := range serviceSets {
		// Read with the declared types: the library does not decode a
		// verdict map's data type, and so its verdicts, from the kernel.
		els, err := d.conn.GetSetElements(specs[name])
		if err != nil {
			return false, fmt.Errorf("read %s: %w", name, err)
		}
		for _, el := range els {
			k, ok := parseKey(el.Key)
			if !ok {
				return false, nil
			}
			e := elem{set: name, key: el.Key, val: el.Val}
			if len(el.KeyEnd) > 0 {
				e.keyEnd = el.KeyEnd
			}
			if specs[name].DataType == nftables.TypeVerdict {
				if e.jump = verdictChain(el.Val); e.jump == "" {
					return false, nil
				}
			}
			if name != slotsMap {
				e.val = nil
			} else if len(e.val) < 8 {
				return false, nil
			}
			en := programmed[k]
			if en.fp == nil {
				en.fp = footprint{}
			}
			en.fp.add(e)
			programmed[k] = en
		}
	}
	chains, err := d.conn.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return false, fmt.Errorf("read chains: %w", err)
	}
	d.chains = map[string]*nftables.Chain{}
	for _, c := range chains {
		if c.Table.Name == tableName && (strings.HasPrefix(c.Name, persistPrefix) || strings.HasPrefix(c.Name, limitPrefix)) {
			d.chains[c.Name] = &nftables.Chain{Name: c.Name, Table: t}
		}
	}
	d.table, d.sets, d.programmed = t, byName, programmed
	for _, e := range programmed {
		for a := range e.fp.backends() {
			d.refs[a]++
		}
		for _, c := range e.fp.chains() {
			d.chainRefs[c]++
		}
	}
	return true, nil
}

// verdictChain decodes the chain of a jump verdict (NFTA_VERDICT_CHAIN),
// which the library leaves as raw attributes in a verdict map element.
func verdictChain(b []byte) string {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return ""
	}
	for ad.Next() {
		if ad.Type() == unix.NFTA_VERDICT_CHAIN {
			return ad.String()
		}
	}
	return ""
}
