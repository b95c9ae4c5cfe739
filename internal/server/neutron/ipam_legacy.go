package neutron

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"

	"github.com/flowlb/flowlb/internal/server/store"
)

// The bitmap scheme that claims replaced (store migration 005): a subnet's
// allocated addresses were bits in "chunk" records of 1024 consecutive
// addresses, stored under the subnet kind with project ipamProject and the
// subnet as parent, and the subnet document held counters and a next-fit
// cursor under "flowlb:ipam". A subnet still in that form is converted the
// first time it is used, under its exclusive lock and in the transaction
// that uses it: every set bit becomes a claim, the chunks are deleted, the
// counters dropped, and the cursor seeds this process's hint, so that
// allocation carries on where it was. The store's migrations are SQL and
// cannot decode the bitmaps (SQLite has no base64), hence Go, on first use.

const legacyChunkBits = 1024

// legacyIPAM is the bitmap scheme's bookkeeping in a subnet document.
type legacyIPAM struct {
	Cursor string `json:"cursor,omitempty"`
	InPool uint64 `json:"in_pool"`
	Used   uint64 `json:"used"`
}

// legacyChunk is a bitmap record: bit i (little-endian within each byte)
// stands for address Base+i.
type legacyChunk struct {
	SubnetID string `json:"subnet_id"`
	Base     string `json:"base"`
	Bits     []byte `json:"bits"`
}

// loadForIPAM reads a subnet to allocate or release addresses in: share-
// locked, so that it is not deleted meanwhile, and converted first if it
// is still in the bitmap scheme. Whether it is, is read without a lock the
// first time this process uses the subnet: converting under the exclusive
// lock while holding the shared one would deadlock with a concurrent
// transaction doing the same. Once converted, a subnet stays so.
func loadForIPAM(tx store.Tx, h *hint, id string) (subnetDoc, error) {
	if !h.isConverted() {
		d, err := getSubnetDoc(tx, id, noLock)
		if err != nil {
			return subnetDoc{}, err
		}
		if d.Legacy != nil {
			return convertLegacy(tx, h, id)
		}
		h.markConverted()
	}
	d, err := getSubnetDoc(tx, id, shareLock)
	if err == nil && d.Legacy != nil { // a conversion this process saw rolled back
		return convertLegacy(tx, h, id)
	}
	return d, err
}

// convertLegacy turns a subnet's bitmap records into claims; the old
// cursor seeds h.
func convertLegacy(tx store.Tx, h *hint, id string) (subnetDoc, error) {
	d, err := getSubnetDoc(tx, id, updateLock)
	if err != nil || d.Legacy == nil { // converted meanwhile
		return d, err
	}
	chunks, err := tx.List(store.KindSubnet, store.Filter{ProjectID: ipamProject, ParentID: id})
	if err != nil {
		return subnetDoc{}, fmt.Errorf("convert IPAM of subnet %s: %w", id, err)
	}
	for _, rec := range chunks {
		if err := claimChunk(tx, id, rec); err != nil {
			return subnetDoc{}, fmt.Errorf("convert IPAM of subnet %s: %w", id, err)
		}
		if err := tx.Delete(store.KindSubnet, rec.ID); err != nil {
			return subnetDoc{}, fmt.Errorf("convert IPAM of subnet %s: delete chunk: %w", id, err)
		}
	}
	if c, err := netip.ParseAddr(d.Legacy.Cursor); err == nil {
		h.seed(toU128(c))
	}
	d.Legacy = nil
	if err := putSubnet(tx, d, false); err != nil {
		return subnetDoc{}, fmt.Errorf("convert IPAM of subnet %s: %w", id, err)
	}
	return d, nil
}

// claimChunk claims the addresses whose bits a chunk record has set.
func claimChunk(tx store.Tx, subnetID string, rec store.Record) error {
	var c legacyChunk
	if err := json.Unmarshal(rec.Data, &c); err != nil {
		return fmt.Errorf("decode chunk %s: %w", rec.ID, err)
	}
	base, err := netip.ParseAddr(c.Base)
	if err != nil {
		return fmt.Errorf("chunk %s: base %q: %w", rec.ID, c.Base, err)
	}
	for off := range min(len(c.Bits)*8, legacyChunkBits) {
		if c.Bits[off/8]&(1<<(off%8)) == 0 {
			continue
		}
		a := toU128(base).add(uint64(off)).addr(base.Is4())
		if err := tx.Claim(claimSpace(subnetID), addrKey(a)); err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return nil
}
