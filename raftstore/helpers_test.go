package raftstore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// timeoutScale stretches every test deadline for slow CI machines
// (CONCORD_TEST_TIMEOUT_SCALE=3 triples them).
var timeoutScale = func() float64 {
	if f, err := strconv.ParseFloat(os.Getenv("CONCORD_TEST_TIMEOUT_SCALE"), 64); err == nil && f > 0 {
		return f
	}
	return 1
}()

// scaled returns d stretched by timeoutScale.
func scaled(d time.Duration) time.Duration { return time.Duration(float64(d) * timeoutScale) }

// waitTimeout is the default deadline for eventually and test contexts.
var waitTimeout = scaled(15 * time.Second)

// eventually calls f at once and then every 25 ms until it returns nil;
// at the deadline it fails the test with f's last error.
func eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %v", timeout, err)
		}
		<-tick.C
	}
}

// testCtx returns a context bounded by waitTimeout and cancelled at cleanup.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// recv waits for one value on ch or fails the test.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatalf("%s: channel closed", what)
		}
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("%s: nothing received within %s", what, waitTimeout)
	}
	var zero T
	return zero
}

// mustNew builds a Store or fails the test; the test must shut it down.
func mustNew(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	return s
}

// mustShutdown shuts s down or fails the test.
func mustShutdown(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Shutdown(testCtx(t)); err != nil {
		t.Fatalf("shutdown %s: %v", s.ID(), err)
	}
}

// memSink is an in-memory raft.SnapshotSink recording how it ended.
type memSink struct {
	bytes.Buffer
	mu        sync.Mutex
	closed    bool
	cancelled bool
	failAfter int // if > 0, Write fails once this many bytes are buffered
}

func (m *memSink) Write(p []byte) (int, error) {
	if m.failAfter > 0 && m.Len()+len(p) > m.failAfter {
		return 0, fmt.Errorf("memSink: disk full")
	}
	return m.Buffer.Write(p)
}

func (m *memSink) ID() string { return "mem" }

func (m *memSink) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

func (m *memSink) Cancel() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cancelled = true
	return nil
}

var _ raft.SnapshotSink = (*memSink)(nil)

// steadyWrites runs writers goroutines putting keys through leader until
// the returned function is called (it waits for them; calling it again
// does nothing).
func steadyWrites(t testing.TB, leader *Store, writers int) func() {
	ctx, cancel := context.WithCancel(testCtx(t))
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				_, _, _ = leader.Apply(ctx, cmdKVPut, put(fmt.Sprintf("w%d=%d", w, i)))
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}
