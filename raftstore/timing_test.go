package raftstore

import (
	"errors"
	"testing"
	"time"
)

func TestLANTimings(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		m       int
		want    Timings
		wantErr bool
	}{
		{m: 1, want: Timings{ms(100), ms(100), ms(100), ms(10)}}, // lease floor
		{m: 2, want: Timings{ms(200), ms(200), ms(100), ms(20)}},
		{m: 5, want: Timings{ms(500), ms(500), ms(250), ms(50)}},
		{m: 10, want: Timings{ms(1000), ms(1000), ms(500), ms(100)}},
		{m: 0, wantErr: true},
		{m: -1, wantErr: true},
		{m: 11, wantErr: true},
	} {
		got, err := LANTimings(tc.m)
		if tc.wantErr {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("LANTimings(%d) error = %v, want ErrInvalidConfig", tc.m, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("LANTimings(%d) = %+v, %v; want %+v", tc.m, got, err, tc.want)
		}
		// Every profile passes raft's own timing rules.
		cfg := TestConfig(t, "n1")
		cfg.SetTimings(got)
		if err := cfg.Validate(); err != nil {
			t.Errorf("multiplier %d: %v", tc.m, err)
		}
	}
}

// DefaultConfig is the default multiplier's profile: the flag's default
// keeps the timings nodes ran with before the profiles existed.
func TestDefaultConfig_IsDefaultMultiplier(t *testing.T) {
	want, err := LANTimings(DefaultRaftMultiplier)
	if err != nil {
		t.Fatal(err)
	}
	d := DefaultConfig()
	if d.Timings() != want {
		t.Fatalf("DefaultConfig timings %+v, want %+v", d.Timings(), want)
	}
	if d.HeartbeatTimeout != 500*time.Millisecond || d.LeaderLeaseTimeout != 250*time.Millisecond || d.CommitTimeout != 50*time.Millisecond {
		t.Fatalf("default timings changed: %+v", d.Timings())
	}
}

func TestConfig_SetRaftMultiplier(t *testing.T) {
	cfg := DefaultConfig()
	before := cfg.Timings()
	if err := cfg.SetRaftMultiplier(0); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("SetRaftMultiplier(0) = %v", err)
	}
	if cfg.Timings() != before {
		t.Fatal("a refused multiplier changed the config")
	}
	if err := cfg.SetRaftMultiplier(1); err != nil {
		t.Fatal(err)
	}
	if cfg.HeartbeatTimeout != 100*time.Millisecond || cfg.ElectionTimeout != 100*time.Millisecond {
		t.Fatalf("multiplier 1 timings %+v", cfg.Timings())
	}
}
