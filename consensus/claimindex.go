package consensus

import "hash/maphash"

// claimIndex maps claim ids to catalog positions (derived, not encoded).
// It is an open-addressing hash table of positions with linear probing:
// the ids themselves stay in the catalog, so the table holds no pointers
// (the garbage collector never scans it) and costs 4 bytes a slot instead
// of a map entry's string header and value. Entries are never removed:
// claims are never deleted and their ids never change (a merge changes
// status and mergedInto only), and every catalog copy (editCatalog,
// scratchCatalog) keeps ids at their positions.
type claimIndex struct {
	slots []int32 // catalog position + 1, 0 for an empty slot; len 0 or a power of two
	n     int     // entries
}

// indexSeed only spreads ids over slots; which slot an id lands in never
// changes a lookup's answer, so replicas need not agree on it.
var indexSeed = maphash.MakeSeed()

// lookup returns the position of id in cat, which the index describes.
func (x *claimIndex) lookup(cat []Claim, id string) (int, bool) {
	if x.n == 0 {
		return 0, false
	}
	mask := len(x.slots) - 1
	for i := int(maphash.String(indexSeed, id)) & mask; ; i = (i + 1) & mask {
		p := x.slots[i]
		if p == 0 {
			return 0, false
		}
		if cat[p-1].ClaimID == id {
			return int(p - 1), true
		}
	}
}

// add indexes cat[pos]. It reports false, and changes nothing, when the id
// is already indexed (only a corrupt snapshot has duplicate ids).
func (x *claimIndex) add(cat []Claim, pos int) bool {
	x.reserve(cat, x.n+1)
	id := cat[pos].ClaimID
	mask := len(x.slots) - 1
	i := int(maphash.String(indexSeed, id)) & mask
	for ; x.slots[i] != 0; i = (i + 1) & mask {
		if cat[x.slots[i]-1].ClaimID == id {
			return false
		}
	}
	x.slots[i] = int32(pos + 1)
	x.n++
	return true
}

// reserve sizes the table for n entries at a load of at most 1/2, so
// probes stay short; growing re-inserts every entry.
func (x *claimIndex) reserve(cat []Claim, n int) {
	if 2*n <= len(x.slots) {
		return
	}
	size := 16
	for size < 2*n {
		size *= 2
	}
	old := x.slots
	x.slots = make([]int32, size)
	mask := size - 1
	for _, p := range old {
		if p == 0 {
			continue
		}
		i := int(maphash.String(indexSeed, cat[p-1].ClaimID)) & mask
		for x.slots[i] != 0 {
			i = (i + 1) & mask
		}
		x.slots[i] = p
	}
}
