package benchload

import (
	"math/bits"
	"time"
)

// Latencies are counted in log-linear buckets of microseconds: exact below
// 64 µs, then 64 buckets per power of two (under 1.6% relative error), so a
// histogram has a fixed size however many samples it takes.
const (
	histSubBits    = 6
	histSub        = 1 << histSubBits
	histMaxShift   = 40
	histBucketsLen = histSub + (histMaxShift+1)*histSub
)

// histogram is not safe for concurrent use: each worker owns one and they
// are merged at the end.
type histogram struct {
	counts [histBucketsLen]uint64
	n      uint64
}

func histBucket(us uint64) int {
	if us < histSub {
		return int(us)
	}
	shift := bits.Len64(us) - histSubBits - 1
	if shift > histMaxShift {
		return histBucketsLen - 1
	}
	return histSub + shift*histSub + int(us>>shift) - histSub
}

// histValue is the middle of bucket i, in microseconds.
func histValue(i int) float64 {
	if i < histSub {
		return float64(i)
	}
	shift := (i - histSub) / histSub
	low := uint64(histSub+(i-histSub)%histSub) << shift
	return float64(low) + float64(uint64(1)<<shift)/2
}

func (h *histogram) record(d time.Duration) {
	us := uint64(0)
	if d > 0 {
		us = uint64(d / time.Microsecond)
	}
	h.counts[histBucket(us)]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantileMs returns the q-quantile (0 < q <= 1) in milliseconds, 0 when
// the histogram is empty.
func (h *histogram) quantileMs(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return histValue(i) / 1000
		}
	}
	return histValue(histBucketsLen-1) / 1000
}

// Percentiles are the latency summary every load reports.
type Percentiles struct {
	P50Ms float64 `json:"p50_ms"`
	P90Ms float64 `json:"p90_ms"`
	P99Ms float64 `json:"p99_ms"`
}

func (h *histogram) percentiles() Percentiles {
	return Percentiles{P50Ms: h.quantileMs(0.50), P90Ms: h.quantileMs(0.90), P99Ms: h.quantileMs(0.99)}
}
