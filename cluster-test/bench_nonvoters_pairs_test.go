//go:build linux

package clustertest

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// How BenchmarkNonVoters orders its windows and compares them with the
// baseline (the first arm, 3 voters alone) despite host load that drifts
// during a run.

// nvRounds is how many windows each arm gets per load by default;
// nvWindow and nvPairedWindow are one window's length by default, without
// and with CONCORD_BENCH_NONVOTERS_PAIRS.
const (
	nvRounds       = 3
	nvWindow       = 5 * time.Second
	nvPairedWindow = 2 * time.Second
)

// nvRoundsFromEnv returns the windows per arm and load, and whether the
// baseline runs between every two other windows:
// CONCORD_BENCH_NONVOTERS_PAIRS=N (paired) wins over
// CONCORD_BENCH_NONVOTERS_ROUNDS=N.
func nvRoundsFromEnv(b *testing.B) (n int, paired bool) {
	for _, name := range []string{"CONCORD_BENCH_NONVOTERS_PAIRS", "CONCORD_BENCH_NONVOTERS_ROUNDS"} {
		v := os.Getenv(name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("%s=%q: want a positive count", name, v)
		}
		return n, name == "CONCORD_BENCH_NONVOTERS_PAIRS"
	}
	return nvRounds, false
}

// nvWindowFromEnv returns one window's length.
func nvWindowFromEnv(b *testing.B, paired bool) time.Duration {
	v := os.Getenv("CONCORD_BENCH_NONVOTERS_WINDOW")
	if v == "" {
		if paired {
			return nvPairedWindow
		}
		return nvWindow
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Second {
		b.Fatalf("CONCORD_BENCH_NONVOTERS_WINDOW=%q: want a duration of at least 1s", v)
	}
	return d
}

// nvSlot is one window: arm (0 the baseline) in its round-th window.
type nvSlot struct{ arm, round int }

// nvSchedule orders the windows of one load. Rounds: every arm in turn,
// rounds times. Paired: the baseline first and after every other window
// (A B A C A B A C ... A), so each other window has a baseline window on
// both sides.
func nvSchedule(arms, rounds int, paired bool) []nvSlot {
	var out []nvSlot
	if !paired || arms < 2 {
		for r := range rounds {
			for k := range arms {
				out = append(out, nvSlot{k, r})
			}
		}
		return out
	}
	base := 0
	out = append(out, nvSlot{0, base})
	for r := range rounds {
		for k := 1; k < arms; k++ {
			base++
			out = append(out, nvSlot{k, r}, nvSlot{0, base})
		}
	}
	return out
}

// nvWindowResult is one window's figures and the arm it measured.
type nvWindowResult struct {
	arm int
	r   nvResult
}

// nvFigures are the figures compared as ratios to the baseline.
var nvFigures = []struct {
	name string
	get  func(nvResult) float64
}{
	{"writes/s", func(r nvResult) float64 { return r.rate }},
	{"p50", func(r nvResult) float64 { return float64(r.p50) }},
	{"p99", func(r nvResult) float64 { return float64(r.p99) }},
	{"leader cpu/write", func(r nvResult) float64 { return r.leaderCPU }},
	// Its inverse: the rate ratio when the servers' CPU limits the rate.
	{"writes/servers-cpu", func(r nvResult) float64 {
		if r.serversCPU == 0 {
			return 0
		}
		return 1 / r.serversCPU
	}},
}

// nvPairRatios returns, for every window of arm in ws (in the order run),
// figure f's ratio to the mean of the nearest baseline windows before and
// after it (paired; one side only at an end), and to the nearest one
// before it alone (single, the old method's per-window ratio; the one
// after for a window with none before).
func nvPairRatios(ws []nvWindowResult, arm int, f func(nvResult) float64) (paired, single []float64) {
	for i, w := range ws {
		if w.arm != arm {
			continue
		}
		var before, after []float64
		for j := i - 1; j >= 0; j-- {
			if ws[j].arm == 0 {
				before = append(before, f(ws[j].r))
				break
			}
		}
		for j := i + 1; j < len(ws); j++ {
			if ws[j].arm == 0 {
				after = append(after, f(ws[j].r))
				break
			}
		}
		both := append(before, after...)
		if len(both) == 0 {
			continue
		}
		mean := 0.0
		for _, v := range both {
			mean += v
		}
		mean /= float64(len(both))
		if mean > 0 {
			paired = append(paired, f(w.r)/mean)
		}
		if one := both[0]; one > 0 {
			single = append(single, f(w.r)/one)
		}
	}
	return paired, single
}

// nvSpread formats values as "median [min q1 q3 max] n=N" (nearest rank).
func nvSpread(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	s := slices.Clone(v)
	slices.Sort(s)
	at := func(q float64) float64 { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return fmt.Sprintf("x%.2f [%.2f %.2f %.2f %.2f] n=%d", at(0.5), s[0], at(0.25), at(0.75), s[len(s)-1], len(s))
}

// nvPairedSummary is one line per figure of arm's paired and single
// ratios.
func nvPairedSummary(ws []nvWindowResult, arm int) string {
	var lines []string
	for _, fig := range nvFigures {
		paired, single := nvPairRatios(ws, arm, fig.get)
		lines = append(lines, fmt.Sprintf("    %-16s paired %s   single %s", fig.name, nvSpread(paired), nvSpread(single)))
	}
	return "\n" + strings.Join(lines, "\n")
}
