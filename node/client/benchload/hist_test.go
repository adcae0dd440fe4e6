package benchload

import (
	"math"
	"testing"
	"time"
)

func TestHistogram_Quantiles(t *testing.T) {
	tests := []struct {
		name    string
		samples []time.Duration
		q       float64
		wantMs  float64
	}{
		{"empty", nil, 0.5, 0},
		{"exact below 64us", []time.Duration{10 * time.Microsecond}, 0.5, 0.010},
		{"median of 1..100 ms", ramp(100, time.Millisecond), 0.5, 50},
		{"p99 of 1..100 ms", ramp(100, time.Millisecond), 0.99, 99},
		{"p90 of 1..1000 us", ramp(1000, time.Microsecond), 0.9, 0.9},
		{"negative counts as zero", []time.Duration{-time.Second}, 1, 0},
		{"huge is clamped", []time.Duration{1000 * time.Hour}, 1, 1000 * 3600 * 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h histogram
			for _, d := range tt.samples {
				h.record(d)
			}
			got := h.quantileMs(tt.q)
			if math.Abs(got-tt.wantMs) > tt.wantMs*0.02+1e-9 {
				t.Fatalf("quantile(%v) = %v ms, want %v ms ±2%%", tt.q, got, tt.wantMs)
			}
		})
	}
}

func ramp(n int, unit time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i+1) * unit
	}
	return out
}

func TestBitset_SetAndMissing(t *testing.T) {
	var a, b bitset
	for _, i := range []uint64{0, 63, 64, 1000} {
		if a.set(i) {
			t.Fatalf("set(%d) reported present on first set", i)
		}
	}
	if !a.set(63) {
		t.Fatal("set(63) twice reported absent")
	}
	b.set(64)
	if got := a.missingFrom(&b); got != 3 {
		t.Fatalf("missing = %d, want 3", got)
	}
}

func TestParseBenchPayload(t *testing.T) {
	tests := []struct {
		params  string
		seq, at int64
		ok      bool
	}{
		{`{"message":{"payload":{"bseq":42,"bt":7,"pad":"x"}}}`, 42, 7, true},
		{`{"message":{"payload":"plain"}}`, 0, 0, false},
		{`{"message":{"payload":{"bseq":,"bt":1}}}`, 0, 1, false},
	}
	for _, tt := range tests {
		seq, at, ok := parseBenchPayload([]byte(tt.params))
		if ok != tt.ok || ok && (seq != tt.seq || at != tt.at) {
			t.Errorf("%s: got %d %d %v", tt.params, seq, at, ok)
		}
	}
	p := newPair("r1", 256, time.Now(), &counters{})
	params := p.params(nil, 9)
	if seq, _, ok := parseBenchPayload(params); !ok || seq != 9 {
		t.Fatalf("own params %s not parsed", params)
	}
	// The payload is exactly size bytes.
	payload := params[len(`{"to":{"agent":"r1"},"payload":`) : len(params)-1]
	if len(payload) != 256 {
		t.Fatalf("payload %d bytes, want 256", len(payload))
	}
}
