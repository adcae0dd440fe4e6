package mapsvc

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concordmap/concord/node/rpc"
)

func TestAnonSessionLimiter(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	type step struct {
		at    time.Duration // since t0
		ip    string
		n     int  // calls
		allow int  // of them allowed
		size  int  // addresses tracked after; -1: not checked
		wait  bool // the last refused call says a positive retry-after
	}
	tests := []struct {
		name         string
		rate         float64
		burst, maxIP int
		steps        []step
	}{
		{"burst then refused", 2, 3, 10, []step{
			{at: 0, ip: "a", n: 5, allow: 3, size: 1, wait: true},
		}},
		{"refill at the rate", 2, 3, 10, []step{
			{at: 0, ip: "a", n: 3, allow: 3, size: 1},
			{at: 0, ip: "a", n: 1, allow: 0, size: 1, wait: true},
			{at: 500 * time.Millisecond, ip: "a", n: 2, allow: 1, size: 1, wait: true},
			{at: 1500 * time.Millisecond, ip: "a", n: 3, allow: 2, size: 1},
		}},
		{"addresses have their own buckets", 1, 2, 10, []step{
			{at: 0, ip: "a", n: 3, allow: 2, size: 1},
			{at: 0, ip: "b", n: 3, allow: 2, size: 2},
		}},
		{"idle addresses evicted once their bucket is full", 1, 2, 10, []step{
			{at: 0, ip: "a", n: 2, allow: 2, size: 1},
			{at: time.Second, ip: "b", n: 1, allow: 1, size: 2},
			// a is idle 2s = burst/rate: forgotten, b (idle 1s) is kept.
			{at: 2 * time.Second, ip: "c", n: 1, allow: 1, size: 2},
		}},
		{"table capped: least recently seen forgotten", 0.001, 1, 2, []step{
			{at: 0, ip: "a", n: 1, allow: 1, size: 1},
			{at: 0, ip: "b", n: 1, allow: 1, size: 2},
			{at: 0, ip: "a", n: 1, allow: 0, size: 2}, // a is now the most recent
			{at: 0, ip: "c", n: 1, allow: 1, size: 2}, // evicts b
			{at: 0, ip: "a", n: 1, allow: 0, size: 2}, // a kept its empty bucket
			{at: 0, ip: "b", n: 1, allow: 1, size: 2}, // b forgotten: a fresh bucket
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newAnonSessionLimiter(tt.rate, tt.burst, tt.maxIP)
			for i, s := range tt.steps {
				allowed := 0
				var lastWait time.Duration
				for range s.n {
					ok, wait := l.allow(s.ip, t0.Add(s.at))
					if ok {
						allowed++
					} else {
						lastWait = wait
					}
				}
				if allowed != s.allow {
					t.Errorf("step %d: %d of %d allowed, want %d", i, allowed, s.n, s.allow)
				}
				if s.size >= 0 && l.size() != s.size {
					t.Errorf("step %d: %d addresses tracked, want %d", i, l.size(), s.size)
				}
				if s.wait && (lastWait <= 0 || lastWait > time.Duration(float64(time.Second)/tt.rate)) {
					t.Errorf("step %d: retry-after %v, want in (0, 1/rate]", i, lastWait)
				}
			}
		})
	}
}

// TestAnonSessionLimiterBounded: many addresses never grow the table past
// its cap.
func TestAnonSessionLimiterBounded(t *testing.T) {
	l := newAnonSessionLimiter(20, 200, 100)
	now := time.Unix(0, 0)
	for i := range 10_000 {
		l.allow(fmt.Sprintf("10.0.%d.%d", i/256, i%256), now)
	}
	if n := l.size(); n != 100 {
		t.Fatalf("%d addresses tracked, want the cap 100", n)
	}
}

func TestAnonSessionLimiterDisabled(t *testing.T) {
	if l := newAnonSessionLimiter(0, 200, 10); l != nil {
		t.Fatal("rate 0 must mean no limiter")
	}
}

func TestAnonLimitKey(t *testing.T) {
	for _, tt := range []struct {
		remote, key string
		ok          bool
	}{
		{"192.0.2.7:5000", "192.0.2.7", true},
		{"[::ffff:192.0.2.7]:5000", "192.0.2.7", true},
		{"[2001:db8:1:2:aaaa::1]:443", "2001:db8:1:2::/64", true},
		{"[2001:db8:1:2:bbbb::9]:443", "2001:db8:1:2::/64", true},
		{"inprocess", "", false},
		{"stdio", "", false},
		{"", "", false},
	} {
		key, ok := anonLimitKey(tt.remote)
		if key != tt.key || ok != tt.ok {
			t.Errorf("anonLimitKey(%q) = %q, %v; want %q, %v", tt.remote, key, ok, tt.key, tt.ok)
		}
	}
}

// A connect naming a session this replica does not know is charged before
// the catch-up barrier (on a follower a Raft write), so an anonymous caller
// over the limit causes none; under it, the connect is charged once even
// though it then starts afresh.
func TestAnonSessionLimit_UnknownSessionChargedBeforeBarrier(t *testing.T) {
	var barriers atomic.Int32
	e := newEnv(t, func(c *Config) {
		c.Barrier = func(context.Context) error { barriers.Add(1); return nil }
		c.AnonymousSessionRate, c.AnonymousSessionBurst = 0.001, 1 // no refill within the test
	})
	const remote = "192.0.2.7:40000"
	anon := &Principal{Method: AuthNone}
	cp := &connectParams{participantType: TypeAgent, sessionID: "nobody-knows-this"}
	target, err := e.svc.resumeTarget(context.Background(), remote, anon, cp)
	if err != nil || target != "" || barriers.Load() != 1 || !cp.anonCharged {
		t.Fatalf("first unknown-session connect: target %q, err %v, barriers %d, charged %v; want a fresh start after one barrier, charged",
			target, err, barriers.Load(), cp.anonCharged)
	}
	// openFresh's check does not charge the same connect again.
	if err := e.svc.anonSessionRefusal(remote, anon, cp); err != nil {
		t.Fatalf("the same connect charged twice: %v", err)
	}
	cp2 := &connectParams{participantType: TypeAgent, sessionID: "nobody-knows-this-either"}
	_, err = e.svc.resumeTarget(context.Background(), remote, anon, cp2)
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeRateLimited {
		t.Fatalf("second unknown-session connect over the limit: %v, want 4001", err)
	}
	if n := barriers.Load(); n != 1 {
		t.Fatalf("%d barriers, want none for the refused connect", n)
	}
	// An authenticated caller is not charged and still catches up.
	cp3 := &connectParams{participantType: TypeAgent, sessionID: "unknown-3"}
	if _, err := e.svc.resumeTarget(context.Background(), remote, &Principal{Method: AuthAPIKey, ID: "k"}, cp3); err != nil || barriers.Load() != 2 {
		t.Fatalf("authenticated unknown-session connect: %v, barriers %d", err, barriers.Load())
	}
}
