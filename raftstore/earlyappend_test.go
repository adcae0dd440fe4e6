package raftstore

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestEarlyAppend_FollowerStoresBeforeLeaderSyncs holds the leader inside
// one append, between its write and its fsync, and watches whether a
// follower stores the entry meanwhile: with the early append it does (the
// two fsyncs overlap); without it raft replicates only after the leader's
// fsync, so no follower can. The write still commits in both cases.
func TestEarlyAppend_FollowerStoresBeforeLeaderSyncs(t *testing.T) {
	for _, tc := range []struct {
		name string
		off  bool
		want bool
	}{
		{"on", false, true},
		{"off", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t, 3, func(cfg *Config) { cfg.NoEarlyAppend = tc.off })
			leader := c.requireOneLeader(t, c.stores)
			ctx := testCtx(t)
			// Every follower holds the log up to here: the next batch
			// continues it.
			_, warm, err := leader.Apply(ctx, cmdKVPut, put("warm=1"))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range c.stores {
				eventually(t, waitTimeout, func() error {
					if got := f.raft.LastIndex(); got < warm {
						return fmt.Errorf("%s has index %d, want %d", f.ID(), got, warm)
					}
					return nil
				})
			}
			// How long the leader is held: far longer than a loopback
			// round trip and a follower's fsync, short against the
			// 500 ms lease.
			hold := scaled(250 * time.Millisecond)
			seen := make(chan bool, 1)
			var armed = true
			hook := func(logs []*raft.Log) {
				if !armed { // only the first append after arming
					return
				}
				armed = false // raft's leader goroutine is the only caller
				last := logs[len(logs)-1].Index
				deadline := time.Now().Add(hold)
				for time.Now().Before(deadline) {
					for _, f := range c.stores {
						if f != leader && f.raft.LastIndex() >= last {
							seen <- true
							return
						}
					}
					time.Sleep(time.Millisecond)
				}
				seen <- false
			}
			leader.testHookLogWritten.Store(&hook)
			if _, _, err := leader.Apply(ctx, cmdKVPut, put("early=1")); err != nil {
				t.Fatal(err)
			}
			if got := recv(t, seen, "the hooked append"); got != tc.want {
				t.Fatalf("a follower stored the entry before the leader's fsync: %v, want %v", got, tc.want)
			}
		})
	}
}

func TestEarlyAppend_Eligible(t *testing.T) {
	cmd := func(n int) []*raft.Log {
		logs := make([]*raft.Log, n)
		for i := range logs {
			logs[i] = &raft.Log{Index: uint64(i + 1), Type: raft.LogCommand}
		}
		return logs
	}
	withConfig := cmd(2)
	withConfig[1].Type = raft.LogConfiguration
	noop := []*raft.Log{{Index: 1, Type: raft.LogNoop}}
	for _, tc := range []struct {
		name string
		logs []*raft.Log
		want bool
	}{
		{"empty", nil, false},
		{"one command", cmd(1), true},
		{"largest batch", cmd(earlyAppendMaxEntries), true},
		{"batch too large", cmd(earlyAppendMaxEntries + 1), false},
		{"noop", noop, true},
		{"configuration change", withConfig, false},
		{"large entry", []*raft.Log{{Index: 1, Type: raft.LogCommand, Data: make([]byte, earlyAppendMaxBytes+1)}}, false},
	} {
		if got := eligible(tc.logs); got != tc.want {
			t.Errorf("%s: eligible = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestEarlyAppend_Answer: raft's own append is answered in the voter's
// stead only when the voter acknowledged all its entries in this term,
// waiting for an early send in flight that carries them.
func TestEarlyAppend_Answer(t *testing.T) {
	const term = 7
	entries := func(lo, hi uint64) []*raft.Log {
		var logs []*raft.Log
		for i := lo; i <= hi; i++ {
			logs = append(logs, &raft.Log{Index: i, Term: term, Type: raft.LogCommand})
		}
		return logs
	}
	ack := &raft.AppendEntriesResponse{RPCHeader: raft.RPCHeader{ID: []byte("v")}, Term: term, LastLog: 5, Success: true}
	for _, tc := range []struct {
		name     string
		peer     earlyPeer
		inFlight *raft.AppendEntriesResponse // an early send of 4..6 answers this
		args     *raft.AppendEntriesRequest
		want     bool
	}{
		{"acknowledged", earlyPeer{match: 5, acked: 5, resp: ack}, nil,
			&raft.AppendEntriesRequest{Term: term, PrevLogEntry: 3, Entries: entries(4, 5)}, true},
		{"acknowledged by raft only", earlyPeer{match: 5, acked: 3, resp: ack}, nil,
			&raft.AppendEntriesRequest{Term: term, PrevLogEntry: 3, Entries: entries(4, 5)}, false},
		{"beyond the acknowledgement", earlyPeer{match: 5, acked: 5, resp: ack}, nil,
			&raft.AppendEntriesRequest{Term: term, PrevLogEntry: 4, Entries: entries(5, 6)}, false},
		{"another term", earlyPeer{match: 5, acked: 5, resp: ack}, nil,
			&raft.AppendEntriesRequest{Term: term + 1, PrevLogEntry: 3, Entries: entries(4, 5)}, false},
		{"heartbeat", earlyPeer{match: 5, acked: 5, resp: ack}, nil,
			&raft.AppendEntriesRequest{Term: term, PrevLogEntry: 5}, false},
		{"in flight, accepted", earlyPeer{match: 3, acked: 3}, &raft.AppendEntriesResponse{Term: term, LastLog: 6, Success: true},
			&raft.AppendEntriesRequest{Term: term, PrevLogEntry: 3, Entries: entries(4, 6)}, true},
		{"in flight, refused", earlyPeer{match: 3}, &raft.AppendEntriesResponse{Term: term, LastLog: 2},
			&raft.AppendEntriesRequest{Term: term, PrevLogEntry: 3, Entries: entries(4, 6)}, false},
		{"in flight, later term", earlyPeer{match: 3}, &raft.AppendEntriesResponse{Term: term + 1, Success: true},
			&raft.AppendEntriesRequest{Term: term, PrevLogEntry: 3, Entries: entries(4, 6)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			var wg sync.WaitGroup
			e := &earlyAppender{
				term: term, wg: &wg, peers: map[raft.ServerID]*earlyPeer{},
				send: func(_ raft.ServerAddress, _ *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
					<-release
					*resp = *tc.inFlight
					return nil
				},
			}
			p := tc.peer
			e.peers["v"] = &p
			if tc.inFlight != nil {
				sent := &earlySend{last: 6, done: make(chan struct{})}
				p.sending = sent
				req := &raft.AppendEntriesRequest{Term: term, PrevLogEntry: 3, Entries: entries(4, 6)}
				e.mu.Lock()
				e.start(&p, sent, "addr", req, time.Now())
				e.mu.Unlock()
				time.AfterFunc(10*time.Millisecond, func() { close(release) })
			}
			var resp raft.AppendEntriesResponse
			got := e.answer("v", tc.args, &resp)
			wg.Wait()
			if got != tc.want {
				t.Fatalf("answer = %v, want %v", got, tc.want)
			}
			if !got {
				return
			}
			if last := tc.args.Entries[len(tc.args.Entries)-1].Index; !resp.Success || resp.Term != term || resp.LastLog < last {
				t.Fatalf("answer filled %+v, want success in term %d with LastLog >= %d", resp, term, last)
			}
		})
	}
}

// TestEarlyAppend_PeerReady: a batch goes early only to a voter known to
// hold the entry before it, with nothing in flight to it and not quiet.
func TestEarlyAppend_PeerReady(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name string
		peer earlyPeer
		want bool
	}{
		{"caught up", earlyPeer{match: 9}, true},
		{"ahead", earlyPeer{match: 12}, true},
		{"lagging", earlyPeer{match: 8}, false},
		{"early send in flight", earlyPeer{match: 9, sending: &earlySend{}}, false},
		{"raft's append in flight", earlyPeer{match: 9, raftBusy: 1}, false},
		{"quiet after a failure", earlyPeer{match: 9, quietTill: now.Add(time.Second)}, false},
		{"quiet time over", earlyPeer{match: 9, quietTill: now.Add(-time.Second)}, true},
	} {
		if got := tc.peer.ready(9, now); got != tc.want {
			t.Errorf("%s: ready = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestEarlyAppend_RefusalForgetsAcknowledgement: once a voter refuses one
// of raft's appends (its log is not what it acknowledged: a server
// re-added with an empty log under the same id), answer stops standing in
// for it, or raft's retries of older entries would be answered "stored"
// and the voter would never catch up.
func TestEarlyAppend_RefusalForgetsAcknowledgement(t *testing.T) {
	const term = 3
	ack := &raft.AppendEntriesResponse{Term: term, LastLog: 5, Success: true}
	e := &earlyAppender{term: term, peers: map[raft.ServerID]*earlyPeer{"v": {match: 5, acked: 5, resp: ack}}}
	args := &raft.AppendEntriesRequest{Term: term, PrevLogEntry: 3, Entries: []*raft.Log{{Index: 4, Term: term}, {Index: 5, Term: term}}}
	var resp raft.AppendEntriesResponse
	if !e.answer("v", args, &resp) {
		t.Fatal("acknowledged entries not answered")
	}
	e.appended("v", term, 9, false)
	if e.answer("v", args, &resp) {
		t.Fatal("answered for a voter that refused raft's append")
	}
	e.appended("v", term, 5, true)
	if e.answer("v", args, &resp) {
		t.Fatal("answered without an early acknowledgement to take the header from")
	}
}
