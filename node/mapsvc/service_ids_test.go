package mapsvc

import (
	"io"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// TestNewIDs_SameAsNewID: newIDs(n) returns exactly what n newID calls
// return from the same entropy and clock (one reading of each per id),
// with a monotonic entropy source and a plain one.
func TestNewIDs_SameAsNewID(t *testing.T) {
	sources := map[string]func() io.Reader{
		"monotonic": func() io.Reader { return ulid.Monotonic(rand.New(rand.NewSource(7)), 0) },
		"plain":     func() io.Reader { return rand.New(rand.NewSource(7)) },
	}
	for name, src := range sources {
		for _, n := range []int{1, 3, 9} {
			mk := func() *Service {
				ms := int64(1_700_000_000_000)
				s := &Service{entropy: src()}
				s.cfg.Clock = func() time.Time { ms += 3 - ms%2; return time.UnixMilli(ms / 2) } // repeats and steps
				return s
			}
			a, b := mk(), mk()
			want := make([]string, n)
			for i := range want {
				want[i] = a.newID()
			}
			if got := b.newIDs(n); !slices.Equal(got, want) {
				t.Errorf("%s, n=%d: newIDs = %v, want %v", name, n, got, want)
			}
		}
	}
}

// TestMeta_Allocs: the metadata of an update (three event ids) takes a
// handful of allocations (10 when each id was ulid.MustNew(...).String()).
func TestMeta_Allocs(t *testing.T) {
	s := &Service{entropy: &ulid.LockedMonotonicReader{MonotonicReader: ulid.Monotonic(rand.New(rand.NewSource(1)), 0)}}
	s.cfg.Clock = time.Now
	allocs := testing.AllocsPerRun(100, func() { _ = s.meta("p", 3) })
	t.Logf("%.0f allocations", allocs)
	if allocs > 4 {
		t.Errorf("%.0f allocations for a 3-id CommandMeta, want at most 4", allocs)
	}
}
