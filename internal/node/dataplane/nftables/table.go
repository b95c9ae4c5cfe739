package nftables

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
)

// create (re)builds the plane's table: flushed and recreated, so that it
// always has exactly the expected shape; podNets fill its pod networks.
func (d *plane) create(uncounted bool, podNets []netip.Prefix) error {
	if err := d.queueCreate(uncounted, podNets); err != nil {
		return err
	}
	if err := d.conn.Flush(); err != nil {
		return fmt.Errorf("create table %s %s: %w", d.fam.name, tableName, err)
	}
	return nil
}

// queueCreate queues what create sends: the table deleted and made anew
// (in one transaction, whatever it held before), its sets and its
// constant chains.
func (d *plane) queueCreate(uncounted bool, podNets []netip.Prefix) error {
	d.table = &nftables.Table{Family: d.fam.table, Name: tableName}
	d.conn.AddTable(d.table)
	d.conn.DelTable(d.table)
	d.conn.AddTable(d.table)
	specs := setSpecs(d.table)
	if uncounted {
		specs = append(specs, &nftables.Set{Table: d.table, Name: uncountedMarker, KeyType: nftables.TypeInteger})
	}
	for _, s := range specs {
		var els []nftables.SetElement
		if s.Name == podNetsSet {
			els = d.fam.intervals(podNets)
		}
		if err := d.conn.AddSet(s, els); err != nil {
			return fmt.Errorf("add set %s: %w", s.Name, err)
		}
	}
	// The sets have their transaction IDs now, for the rules to refer to.
	d.sets = setsByName(specs)
	for _, c := range baseChains(d.schema, !uncounted) {
		d.queueChain(c)
	}
	return nil
}

// queueChain adds a chain and its rules.
func (d *plane) queueChain(spec chainSpec) {
	ch := spec.chain
	ch.Table = d.table
	d.conn.AddChain(&ch)
	for _, r := range spec.rules {
		d.conn.AddRule(&nftables.Rule{Table: d.table, Chain: &ch, Exprs: r.exprs})
	}
}

// queueClassChain adds a persistence or connection-limit chain, and the
// set it owns.
func (d *plane) queueClassChain(spec chainSpec) error {
	for _, s := range classChainSets(d.table, spec.chain.Name) {
		if err := d.conn.AddSet(s, nil); err != nil {
			return fmt.Errorf("add set %s: %w", s.Name, err)
		}
	}
	d.queueChain(spec)
	return nil
}

// queueRemoveClassChain removes a class chain, and the set it owns, once
// no element jumps to it.
func (d *plane) queueRemoveClassChain(name string) {
	ch := &nftables.Chain{Name: name, Table: d.table}
	d.conn.FlushChain(ch)
	d.conn.DelChain(ch)
	for _, s := range classChainSets(d.table, name) {
		d.conn.DelSet(s)
	}
}
