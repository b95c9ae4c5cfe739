package neutron

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/flowlb/flowlb/internal/server/store"
)

// Subnets never overlap: not on one network, as Neutron refuses, and not
// across networks either, which Neutron allows (allow_overlapping_ips)
// but flowlb cannot serve: its data plane is flat, every node programs
// every load balancer keyed by VIP address, protocol and port, so two
// networks' equal addresses would be one VIP. Unique subnets make every
// address's claim (ipam.go) unique in the whole deployment.
//
// Overlap is a relation between ranges, which no per-subnet claim or
// unique key can enforce, so every change to the set of subnets first
// locks one record, and checks and writes under it. Subnets change
// rarely; VIP allocations never take this lock.

// subnetSetLockID is the record that serialises changes to the set of
// subnets. It is stored as a subnet-kind record of ipamProject, so the
// API never shows it (view.go, getSubnetDoc), and made on first use.
const subnetSetLockID = "flowlb:subnet-set-lock"

// lockSubnetSet takes the subnet set's lock until tx ends. The first
// transaction to need it inserts the record: a concurrent one cannot see
// that uncommitted row, and its own insert of the same key waits for the
// first to end (PostgreSQL; SQLite has one writer anyway), then finds the
// row and locks it.
func lockSubnetSet(tx store.Tx) error {
	for range 3 {
		_, err := tx.GetForUpdate(store.KindSubnet, subnetSetLockID)
		if err == nil {
			return nil
		}
		if !isNotFound(err) {
			return fmt.Errorf("lock the subnet set: %w", err)
		}
		err = tx.Insert(store.Record{Kind: store.KindSubnet, ID: subnetSetLockID, ProjectID: ipamProject, Data: []byte("{}")})
		if err == nil {
			return nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("lock the subnet set: %w", err)
		}
	}
	return errors.New("lock the subnet set: its record was made and removed concurrently")
}

// allSubnets reads every subnet of every network.
func allSubnets(tx store.ReadTx) ([]subnetDoc, error) {
	recs, err := tx.List(store.KindSubnet, store.Filter{})
	if err != nil {
		return nil, fmt.Errorf("list subnets: %w", err)
	}
	out := make([]subnetDoc, 0, len(recs))
	for _, rec := range recs {
		if rec.ProjectID == ipamProject {
			continue // bitmap records and the lock: not subnets
		}
		d, err := decodeSubnet(rec)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// checkOverlap refuses a new subnet p on network netID that overlaps an
// existing subnet: with Neutron's refusal when that subnet is on the same
// network, and with the same error type and the same words (clients look
// for "overlaps with another subnet" to try the next range) plus why,
// when it is on another. Neutron does not name the other subnet; neither
// does this. Call it with the subnet set locked.
func checkOverlap(tx store.ReadTx, netID string, p netip.Prefix) error {
	subnets, err := allSubnets(tx)
	if err != nil {
		return err
	}
	elsewhere := false
	for _, d := range subnets {
		other, err := netip.ParsePrefix(d.CIDR)
		if err != nil || !other.Overlaps(p) {
			continue
		}
		if d.NetworkID == netID {
			return invalidInput("Requested subnet with cidr: %s for network: %s overlaps with another subnet", p, netID)
		}
		elsewhere = true
	}
	if elsewhere {
		return invalidInput("Requested subnet with cidr: %s for network: %s overlaps with another subnet, on another network; "+
			"flowlb does not allow overlapping subnets across networks, because its data plane does not separate networks", p, netID)
	}
	return nil
}

// mayBeShared reports whether an address lies in more than one subnet,
// which only subnets created before overlaps were refused can do: then it
// may be claimed, and be a VIP, once in each.
func mayBeShared(tx store.ReadTx, address string) (bool, error) {
	a, err := netip.ParseAddr(address)
	if err != nil {
		return true, nil // not one of ours: nothing proves it is unique
	}
	subnets, err := allSubnets(tx)
	if err != nil {
		return false, err
	}
	holders := 0
	for _, d := range subnets {
		if p, err := netip.ParsePrefix(d.CIDR); err == nil && p.Contains(a.Unmap()) {
			holders++
		}
	}
	return holders > 1, nil
}
