package backoff

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBackoff_BoundsAndGrowth(t *testing.T) {
	base, limit := 100*time.Millisecond, 2*time.Second
	r := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		attempt  int
		nominal  time.Duration
		describe string
	}{
		{0, 100 * time.Millisecond, "first retry uses the base"},
		{1, 200 * time.Millisecond, "doubles"},
		{4, 1600 * time.Millisecond, "keeps doubling"},
		{5, 2 * time.Second, "capped"},
		{60, 2 * time.Second, "no overflow far past the cap"},
	}
	for _, tc := range tests {
		for range 200 {
			d := Delay(tc.attempt, base, limit, r)
			if d < tc.nominal/2 || d > tc.nominal {
				t.Fatalf("%s: attempt %d gave %v, want within [%v, %v]", tc.describe, tc.attempt, d, tc.nominal/2, tc.nominal)
			}
		}
	}
}

func TestBackoff_SeededSourceIsReproducibleAndJittered(t *testing.T) {
	seq := func(seed uint64) []time.Duration {
		r := rand.New(rand.NewPCG(seed, 0))
		out := make([]time.Duration, 8)
		for i := range out {
			out[i] = Delay(i, time.Second, 30*time.Second, r)
		}
		return out
	}
	if a, b := seq(7), seq(7); !slices.Equal(a, b) {
		t.Fatalf("same seed, different delays: %v vs %v", a, b)
	}
	if a, b := seq(7), seq(8); slices.Equal(a, b) {
		t.Fatalf("different seeds gave identical delays %v: no jitter", a)
	}
}

func TestDelay_GlobalSource(t *testing.T) {
	for range 200 {
		if d := Delay(2, time.Second, time.Minute, nil); d < 2*time.Second || d > 4*time.Second {
			t.Fatalf("attempt 2 gave %v, want within [2s, 4s]", d)
		}
	}
}
