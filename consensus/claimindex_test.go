package consensus

import (
	"fmt"
	"testing"
)

// The claim index must answer as the map it replaced: every indexed id at
// its position, nothing for an absent id, a duplicate refused (counted once).
func TestClaimIndex_MatchesMap(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 100, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var cat []Claim
			var x claimIndex
			want := map[string]int{}
			for i := 0; i < n; i++ {
				id := fmt.Sprintf("p%d:0:%d", i%5, i)
				if i%10 == 9 {
					id = cat[i/2].ClaimID // a duplicate
				}
				cat = append(cat, Claim{ClaimID: id})
				_, dup := want[id]
				if got := x.add(cat, i); got == dup {
					t.Fatalf("add(%q) = %v with duplicate %v", id, got, dup)
				}
				if !dup {
					want[id] = i
				}
			}
			if x.n != len(want) {
				t.Fatalf("n = %d, want %d", x.n, len(want))
			}
			for id, pos := range want {
				if got, ok := x.lookup(cat, id); !ok || got != pos {
					t.Fatalf("lookup(%q) = %d %v, want %d", id, got, ok, pos)
				}
			}
			for _, id := range []string{"", "p0:0:", "absent", "p1:0:1#2"} {
				if _, ok := x.lookup(cat, id); ok {
					t.Fatalf("lookup(%q) found an absent id", id)
				}
			}
		})
	}
}

func TestClaimIndex_ReserveKeepsEntries(t *testing.T) {
	cat := []Claim{{ClaimID: "a"}, {ClaimID: "b"}}
	var x claimIndex
	x.add(cat, 0)
	x.add(cat, 1)
	x.reserve(cat, 500)
	if len(x.slots) < 1000 {
		t.Fatalf("reserve(500) left %d slots", len(x.slots))
	}
	for i, c := range cat {
		if got, ok := x.lookup(cat, c.ClaimID); !ok || got != i {
			t.Fatalf("lookup(%q) = %d %v after reserve", c.ClaimID, got, ok)
		}
	}
}
