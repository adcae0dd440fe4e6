package raftstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// codecKV is kvModule with a ResultCodec for cmdKVPut: 'v'+previous value,
// or 'e'+key for a *kvError. The put "corrupt=..." encodes bytes that do
// not decode, and cmdKVDelete is declined.
type codecKV struct {
	*kvModule
	decoded *atomic.Int64
}

func (c codecKV) EncodeResult(t concordv1.CommandType, r Result) ([]byte, bool) {
	if t != cmdKVPut {
		return nil, false
	}
	var ke *kvError
	switch {
	case r.Err == nil:
		return append([]byte{'v'}, r.Value.(string)...), true
	case errors.As(r.Err, &ke):
		return append([]byte{'e'}, ke.Key...), true
	}
	return nil, false
}

func (c codecKV) DecodeResult(t concordv1.CommandType, data []byte) (Result, error) {
	c.decoded.Add(1)
	switch {
	case len(data) > 0 && data[0] == 'v' && string(data[1:]) == "corrupted":
		return Result{}, errors.New("kv: corrupt result")
	case len(data) > 0 && data[0] == 'v':
		return Result{Value: string(data[1:])}, nil
	case len(data) > 0 && data[0] == 'e':
		return Result{Err: &kvError{Key: string(data[1:])}}, nil
	}
	return Result{}, errors.New("kv: bad result")
}

// TestForward_ResultThroughTheForward: a follower's Apply of a type whose
// module has a ResultCodec answers with the leader's result (value or
// domain error) decoded, without waiting for its own apply; declined
// types and undecodable results fall back to the local apply.
func TestForward_ResultThroughTheForward(t *testing.T) {
	var decoded atomic.Int64
	c, _, leader := newForwardingCluster(t, 3, func(cfg *Config) {
		cfg.Modules[0] = codecKV{kvModule: cfg.Modules[0].(*kvModule), decoded: &decoded}
	})
	var f *Store
	for _, s := range c.stores {
		if s != leader {
			f = s
			break
		}
	}
	ctx := testCtx(t)
	for _, tc := range []struct {
		name        string
		typ         concordv1.CommandType
		cmd         string
		wantValue   any
		wantKey     string // for a cmd "=...": the *kvError's key
		wantDecoded int64  // DecodeResult calls this Apply adds
		localApply  bool   // Apply returns only after the local apply
	}{
		{name: "value", typ: cmdKVPut, cmd: "a=1", wantValue: "", wantDecoded: 1},
		{name: "previous value", typ: cmdKVPut, cmd: "a=2", wantValue: "1", wantDecoded: 1},
		{name: "domain error", typ: cmdKVPut, cmd: "=x", wantKey: "", wantDecoded: 1},
		{name: "value that will not decode", typ: cmdKVPut, cmd: "b=corrupted", wantValue: "", wantDecoded: 1},
		{name: "undecodable result: the local one", typ: cmdKVPut, cmd: "b=3", wantValue: "corrupted", wantDecoded: 1, localApply: true},
		{name: "declined type", typ: cmdKVDelete, cmd: "a", wantValue: nil, localApply: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := decoded.Load()
			v, idx, err := f.Apply(ctx, tc.typ, put(tc.cmd))
			if strings.HasPrefix(tc.cmd, "=") {
				var ce *CommandError
				var ke *kvError
				if !errors.As(err, &ce) || ce.Index != idx || ce.Type != tc.typ || !errors.As(err, &ke) || ke.Key != tc.wantKey {
					t.Fatalf("Apply = %v, %d, %v; want a CommandError at the index wrapping kvError{%q}", v, idx, err, tc.wantKey)
				}
			} else if err != nil || v != tc.wantValue {
				t.Fatalf("Apply = %#v, %d, %v; want %#v", v, idx, err, tc.wantValue)
			}
			if tc.localApply && f.AppliedIndex() < idx {
				t.Fatalf("returned before the local apply of %d (applied %d)", idx, f.AppliedIndex())
			}
			if err := f.WaitApplied(ctx, idx); err != nil {
				t.Fatal(err)
			}
			if got := decoded.Load() - before; got != tc.wantDecoded {
				t.Fatalf("%d results decoded, want %d", got, tc.wantDecoded)
			}
		})
	}
}

// TestWaitAppliedSoon: a follower learns of a leader-local commit only at
// the leader's next AppendEntries (leader-local writes do not nudge), here
// after a 2 s CommitTimeout; WaitAppliedSoon has the leader send it now.
func TestWaitAppliedSoon(t *testing.T) {
	const commitTimeout = 2 * time.Second
	c, _, leader := newForwardingCluster(t, 3, func(cfg *Config) { cfg.CommitTimeout = commitTimeout })
	ctx := testCtx(t)
	for _, f := range c.stores {
		if f == leader {
			continue
		}
		for i := range 3 {
			_, idx, err := leader.Apply(ctx, cmdKVPut, put(fmt.Sprintf("soon-%s=%d", f.ID(), i)))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := f.WaitAppliedSoon(ctx, idx); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took >= commitTimeout/2 {
				t.Fatalf("%s applied %d after %v (commit timeout %v)", f.ID(), idx, took, commitTimeout)
			}
		}
	}
}

// TestWaitAppliedSoon_NoLeaderSaysSo: a server that knows no leader (here
// one never bootstrapped; in production one cut off by a partition) and
// cannot reach the index says "no leader", so its caller answers the
// retryable no_leader a write through it would, not a bare timeout.
func TestWaitAppliedSoon_NoLeaderSaysSo(t *testing.T) {
	cfg := TestConfig(t, "lonely", newKV())
	cfg.Forwarder = &directForwarder{c: &testCluster{}}
	s := mustNew(t, cfg)
	defer mustShutdown(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := s.WaitAppliedSoon(ctx, 5)
	if !errors.Is(err, ErrNoLeader) || !errors.Is(err, ErrTimeout) {
		t.Fatalf("WaitAppliedSoon without a leader: %v, want ErrNoLeader and ErrTimeout", err)
	}
}

// A forwarded NOOP is a read-your-write fence (WaitAppliedSoon): its own
// AppendEntries carries the commit index its origin waits for, and nobody
// waits for the NOOP's commit, so the leader does not nudge it (no second
// NOOP per fence). A forwarded command whose origin waits for its own
// apply is nudged at once: the control, which also shows how long a nudge
// takes here.
func TestApplyForwarded_FenceNOOPNotNudged(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.requireOneLeader(t, c.stores)

	t0 := time.Now()
	reply, err := leader.ApplyForwarded(testCtx(t), encode(cmdKVPut, put("a=1")))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, waitTimeout, func() error {
		if got := leader.raft.LastIndex(); got != reply.Index+1 {
			return fmt.Errorf("last index %d after a forwarded write at %d, want its nudge at %d", got, reply.Index, reply.Index+1)
		}
		return nil
	})
	nudged := time.Since(t0)

	fence, err := leader.ApplyForwarded(testCtx(t), nudgeBody)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing must follow the fence: watch ten times as long as the
	// control's nudge took to appear (at least 200 ms).
	watch := max(10*nudged, 200*time.Millisecond)
	for end := time.Now().Add(watch); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if got := leader.raft.LastIndex(); got != fence.Index {
			t.Fatalf("last index %d after a forwarded fence NOOP at %d: the fence was nudged", got, fence.Index)
		}
	}
}
