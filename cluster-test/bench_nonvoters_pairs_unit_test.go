//go:build linux

package clustertest

import (
	"slices"
	"testing"
)

// Paired windows put the baseline on both sides of every other window,
// and a ratio against their mean cancels a steady drift of the host that
// a ratio to one neighbour does not.
func TestNVPairs_ScheduleAndRatios(t *testing.T) {
	got := nvSchedule(3, 2, true)
	want := []nvSlot{{0, 0}, {1, 0}, {0, 1}, {2, 0}, {0, 2}, {1, 1}, {0, 3}, {2, 1}, {0, 4}}
	if !slices.Equal(got, want) {
		t.Fatalf("paired schedule %v, want %v", got, want)
	}
	if got, want := nvSchedule(2, 2, false), []nvSlot{{0, 0}, {1, 0}, {0, 1}, {1, 1}}; !slices.Equal(got, want) {
		t.Fatalf("rounds schedule %v, want %v", got, want)
	}

	// The host slows by 10% per window; arm 1 does 0.9 of the baseline.
	var ws []nvWindowResult
	for i, s := range nvSchedule(2, 4, true) {
		speed := 1000 * (1 - 0.1*float64(i))
		if s.arm == 1 {
			speed *= 0.9
		}
		ws = append(ws, nvWindowResult{arm: s.arm, r: nvResult{rate: speed}})
	}
	paired, single := nvPairRatios(ws, 1, func(r nvResult) float64 { return r.rate })
	if len(paired) != 4 || len(single) != 4 {
		t.Fatalf("%d paired and %d single ratios, want 4 each", len(paired), len(single))
	}
	for i := range paired {
		if paired[i] < 0.899 || paired[i] > 0.901 {
			t.Errorf("paired ratio %d = %.4f, want 0.90: the drift did not cancel", i, paired[i])
		}
		if single[i] > 0.89 {
			t.Errorf("single ratio %d = %.4f, want it below 0.89 (the drift counts against it)", i, single[i])
		}
	}
}
