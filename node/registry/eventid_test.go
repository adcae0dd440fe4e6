package registry

import (
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// refIDs is the id supply as it was before ids were parsed lazily and
// the first taken ids kept in an array: every consumed proposer id parsed
// on the spot, every taken id in a map. txn must give the same ids in the
// same order.
type refIDs struct {
	window map[string]uint64
	ts     int64
	index  uint64
	ids    []string
	nextID int
	lastID ulid.ULID
	haveID bool
	taken  map[string]bool
}

func (t *refIDs) used(id string) bool {
	_, in := t.window[id]
	return t.taken[id] || in
}

func (t *refIDs) take(id string) string { t.taken[id] = true; return id }

func (t *refIDs) eventID() string {
	for t.nextID < len(t.ids) {
		id := t.ids[t.nextID]
		t.nextID++
		if u, err := ulid.ParseStrict(id); err == nil {
			t.lastID, t.haveID = u, true
		}
		if id != "" && !t.used(id) {
			return t.take(id)
		}
	}
	if !t.haveID {
		var u ulid.ULID
		ms := max(t.ts, 0)
		if uint64(ms) > ulid.MaxTime() {
			ms = int64(ulid.MaxTime())
		}
		_ = u.SetTime(uint64(ms))
		var entropy [10]byte
		binary.BigEndian.PutUint64(entropy[2:], t.index)
		_ = u.SetEntropy(entropy[:])
		t.lastID, t.haveID = u, true
		if id := u.String(); !t.used(id) {
			return t.take(id)
		}
	}
	for {
		incEntropy(&t.lastID)
		if id := t.lastID.String(); !t.used(id) {
			return t.take(id)
		}
	}
}

func (t *refIDs) siblingEventID(id string, ts int64) string {
	if u, err := ulid.ParseStrict(id); err == nil {
		t.lastID, t.haveID = u, true
		if !t.used(id) {
			return t.take(id)
		}
	}
	if !t.haveID {
		t.ts = ts
	}
	return t.eventID()
}

// TestEventID_MatchesEagerParsing: random id supplies (ULIDs new, in the
// window, repeated, lower case; empty and malformed strings) and more or
// fewer events than ids, some through siblingEventID, give the ids the
// eager version gave.
func TestEventID_MatchesEagerParsing(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 14))
	h := newHarness(t, 50)
	ulidAt := func(ms, n uint64) string {
		var u ulid.ULID
		_ = u.SetTime(ms)
		binary.BigEndian.PutUint64(u[8:], n)
		return u.String()
	}
	// A window holding ULIDs that proposers will reuse, and their
	// successors (what a derivation from them would give).
	var windowIDs []string
	for i := range 20 {
		windowIDs = append(windowIDs, ulidAt(1000, uint64(i)))
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	evs := make([]Event, len(windowIDs))
	for i, id := range windowIDs {
		evs[i] = Event{ID: id}
	}
	h.s.d.events.appendAll(evs)

	for trial := range 3000 {
		var ids []string
		for range rng.IntN(7) {
			var id string
			switch rng.IntN(7) {
			case 0:
				id = windowIDs[rng.IntN(len(windowIDs))]
			case 1:
				id = ""
			case 2:
				id = "not-a-ulid"
			case 3:
				if len(ids) > 0 {
					id = ids[rng.IntN(len(ids))]
				}
			case 4:
				id = strings.ToLower(ulidAt(uint64(trial), 7))
			default:
				id = ulidAt(uint64(2000+trial), uint64(rng.IntN(3)))
			}
			ids = append(ids, id)
		}
		meta := &concordv1.CommandMeta{TimestampMs: int64(rng.IntN(3) * 1000), EventIds: ids}
		index := uint64(trial + 1)
		tx := h.s.begin(index, meta)
		ref := &refIDs{window: h.s.d.events.byID, ts: meta.TimestampMs, index: index, ids: ids, taken: map[string]bool{}}
		for k := range rng.IntN(len(ids) + 8) {
			var got, want string
			if rng.IntN(4) == 0 {
				sib := []string{"", "bad", windowIDs[0], ulidAt(uint64(trial), 99)}[rng.IntN(4)]
				ts := int64(rng.IntN(5000))
				got, want = tx.siblingEventID(sib, ts), ref.siblingEventID(sib, ts)
			} else {
				got, want = tx.eventID(), ref.eventID()
			}
			if got != want {
				t.Fatalf("trial %d, id %d (supply %q): got %s, want %s", trial, k, ids, got, want)
			}
		}
	}
}
