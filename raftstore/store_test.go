package raftstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

func TestConfig_Validate(t *testing.T) {
	valid := func() Config {
		c := DefaultConfig()
		c.NodeID, c.DataDir = "n1", "/tmp/x"
		return c
	}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string // "" = valid
	}{
		{"defaults plus required", func(*Config) {}, ""},
		{"no node id", func(c *Config) { c.NodeID = "" }, "NodeID"},
		{"no data dir", func(c *Config) { c.DataDir = "" }, "DataDir"},
		{"bad bind", func(c *Config) { c.BindAddr = "nope" }, "BindAddr"},
		{"bad advertise", func(c *Config) { c.AdvertiseAddr = "x:y:z" }, "AdvertiseAddr"},
		{"lease above heartbeat", func(c *Config) { c.LeaderLeaseTimeout = 2 * c.HeartbeatTimeout }, "LeaderLeaseTimeout"},
		{"election below heartbeat", func(c *Config) { c.ElectionTimeout = c.HeartbeatTimeout / 2 }, "ElectionTimeout"},
		{"batch too large", func(c *Config) { c.MaxApplyBatch = 5000 }, "MaxAppendEntries"},
		{"batch zero", func(c *Config) { c.MaxApplyBatch = 0 }, "MaxAppendEntries"},
		{"no apply timeout", func(c *Config) { c.ApplyTimeout = 0 }, "ApplyTimeout"},
		{"no retained snapshots", func(c *Config) { c.RetainSnapshots = 0 }, "RetainSnapshots"},
		{"no pool", func(c *Config) { c.MaxPool = 0 }, "MaxPool"},
		{"no transport timeout", func(c *Config) { c.TransportTimeout = 0 }, "TransportTimeout"},
		{"zero snapshot threshold", func(c *Config) { c.SnapshotThreshold = 0 }, "SnapshotThreshold"},
		{"log cap below snapshot threshold", func(c *Config) { c.MaxLogEntries = c.SnapshotThreshold - 1 }, "MaxLogEntries"},
		{"log cap off", func(c *Config) { c.MaxLogEntries = 0 }, ""},
		{"no RPC in flight", func(c *Config) { c.MaxRPCsInFlight = 0 }, "MaxRPCsInFlight"},
		{"pipelining on", func(c *Config) { c.MaxRPCsInFlight = 4 }, ""},
		{"negative non-voter pacing", func(c *Config) { c.NonvoterReplicationInterval = -time.Millisecond }, "NonvoterReplicationInterval"},
		{"non-voter pacing too long", func(c *Config) { c.NonvoterReplicationInterval = 2 * time.Second }, "NonvoterReplicationInterval"},
		{"non-voter pacing off", func(c *Config) { c.NonvoterReplicationInterval = 0 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.mutate(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want it to mention %s", err, tt.want)
			}
		})
	}
}

func TestNew_Errors(t *testing.T) {
	cfg := TestConfig(t, "n1", newKV(), newKV())
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "duplicate module") {
		t.Fatalf("duplicate modules: %v", err)
	}
	cfg = TestConfig(t, "n1")
	cfg.BindAddr = "0.0.0.0:0"
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "AdvertiseAddr") {
		t.Fatalf("wildcard bind without advertise: %v", err)
	}
}

func TestStore_ApplyAndResults(t *testing.T) {
	kv, list := newKV(), &listModule{}
	s := NewTestStore(t, kv, list)
	ctx := testCtx(t)

	res, idx1, err := s.Apply(ctx, cmdKVPut, put("a=1"))
	if err != nil || res != "" || idx1 == 0 {
		t.Fatalf("first put: %v %d %v", res, idx1, err)
	}
	res, idx2, err := s.Apply(ctx, cmdKVPut, put("a=2"))
	if err != nil || res != "1" || idx2 <= idx1 {
		t.Fatalf("second put: %v %d %v", res, idx2, err)
	}
	if res, _, err := s.Apply(ctx, cmdLogAdd, put("x")); err != nil || res != 1 {
		t.Fatalf("list add: %v %v", res, err)
	}
	if s.AppliedIndex() < idx2 {
		t.Fatalf("applied %d < %d", s.AppliedIndex(), idx2)
	}

	// Domain errors: committed, returned as *CommandError, module error reachable.
	_, idx, err := s.Apply(ctx, cmdKVDelete, put("missing"))
	var ce *CommandError
	if !errors.Is(err, errKeyNotFound) || !errors.As(err, &ce) || ce.Index != idx || idx == 0 || ce.Type != cmdKVDelete {
		t.Fatalf("domain error: %v (index %d)", err, idx)
	}
	var ke *kvError
	if _, _, err := s.Apply(ctx, cmdKVPut, put("bad")); !errors.As(err, &ke) || ke.Key != "bad" {
		t.Fatalf("typed domain error: %v", err)
	}

	// Refused before reaching the log.
	tests := []struct {
		name string
		do   func() error
		want error
	}{
		{"unknown type", func() error {
			_, _, err := s.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_SCOPE_CREATE, put("x"))
			return err
		}, ErrUnknownCommand},
		{"wrong message", func() error { _, _, err := s.Apply(ctx, cmdKVPut, &concordv1.Noop{}); return err }, ErrInvalidCommand},
		{"raw unknown", func() error { _, _, err := s.ApplyRaw(ctx, []byte{100}); return err }, ErrUnknownCommand},
		{"raw corrupt body", func() error { _, _, err := s.ApplyRaw(ctx, []byte{byte(cmdKVPut), 0xff}); return err }, ErrInvalidCommand},
		{"raw empty", func() error { _, _, err := s.ApplyRaw(ctx, nil); return err }, ErrInvalidCommand},
	}
	before := s.AppliedIndex()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.do(); !errors.Is(err, tt.want) {
				t.Fatalf("err %v, want %v", err, tt.want)
			}
		})
	}
	if s.AppliedIndex() != before {
		t.Fatal("a refused command reached the log")
	}

	// Raw commands as forwarded by followers; an unknown type is refused
	// even with the ignorable bit, and nothing reaches the log.
	if res, idx, err := s.ApplyRaw(ctx, encode(cmdKVPut, put("b=9"))); err != nil || res != "" || idx == 0 {
		t.Fatalf("raw put: %v %d %v", res, idx, err)
	}
	before = s.AppliedIndex()
	for _, raw := range [][]byte{{0x90, 1, 2}, encode(200, put("b=1")), encode(255, &concordv1.AgentRegisterRequest{Agent: &concordv1.AgentRecord{Id: "x"}})} {
		if _, _, err := s.ApplyRaw(ctx, raw); !errors.Is(err, ErrUnknownCommand) && !errors.Is(err, ErrInvalidCommand) {
			t.Fatalf("raw %x: err %v, want refused", raw[:1], err)
		}
	}
	if s.AppliedIndex() != before {
		t.Fatal("a refused raw command reached the log")
	}
	if v, _ := kv.get("b"); v != "9" {
		t.Fatalf("b=%q", v)
	}
}

func TestStore_ApplyTimeouts(t *testing.T) {
	s := NewTestStore(t, newKV())
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, _, err := s.Apply(expired, cmdKVPut, put("a=1")); !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("expired ctx: %v", err)
	}
	cancelled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, _, err := s.Apply(cancelled, cmdKVPut, put("a=1")); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
}

func TestStore_RestartRecoversState(t *testing.T) {
	for _, withSnapshot := range []bool{false, true} {
		t.Run(fmt.Sprintf("snapshot=%v", withSnapshot), func(t *testing.T) {
			cfg := TestConfig(t, "n1")
			kv1, list1 := newKV(), &listModule{}
			cfg.Modules = []Module{kv1, list1}
			s1 := mustNew(t, cfg)
			ctx := testCtx(t)
			if err := s1.BootstrapSelf(ctx); err != nil {
				t.Fatal(err)
			}
			if err := s1.WaitLeadership(ctx); err != nil {
				t.Fatal(err)
			}
			var last uint64
			apply := func(s *Store, n, from int) {
				for i := from; i < from+n; i++ {
					_, idx, err := s.Apply(ctx, cmdKVPut, put(fmt.Sprintf("k%d=v%d", i%7, i)))
					if err != nil {
						t.Fatal(err)
					}
					if _, _, err := s.Apply(ctx, cmdLogAdd, put(fmt.Sprint(i))); err != nil {
						t.Fatal(err)
					}
					last = idx
				}
			}
			apply(s1, 20, 0)
			if withSnapshot {
				if err := s1.Snapshot(ctx); err != nil {
					t.Fatalf("snapshot: %v", err)
				}
				apply(s1, 5, 20) // these come back by log replay
			}
			wantKV, wantList := kv1.snapshotMap(), list1.list()
			mustShutdown(t, s1)

			kv2, list2 := newKV(), &listModule{}
			cfg.Modules = []Module{kv2, list2}
			cfg.BindAddr = "127.0.0.1:0"
			s2 := StartTestStore(t, cfg) // BootstrapSelf is a no-op on existing state
			if err := s2.WaitApplied(ctx, last); err != nil {
				t.Fatalf("wait applied %d: %v", last, err)
			}
			eventually(t, waitTimeout, func() error {
				if !maps.Equal(kv2.snapshotMap(), wantKV) || !slices.Equal(list2.list(), wantList) {
					return fmt.Errorf("state not recovered: kv %v list %d items", kv2.snapshotMap(), len(list2.list()))
				}
				return nil
			})
			if withSnapshot != (kv2.restores > 0) {
				t.Fatalf("snapshot restores %d with snapshot=%v", kv2.restores, withSnapshot)
			}
			if _, _, err := s2.Apply(ctx, cmdKVPut, put("after=restart")); err != nil {
				t.Fatalf("apply after restart: %v", err)
			}
		})
	}
}

func TestStore_ShutdownIdempotentAndApplyAfter(t *testing.T) {
	s := mustNew(t, TestConfig(t, "n1", newKV()))
	ctx := testCtx(t)
	if err := s.Snapshot(ctx); !errors.Is(err, ErrNothingToSnapshot) {
		t.Fatalf("snapshot before anything was applied: %v", err)
	}
	if err := s.BootstrapSelf(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.BootstrapSelf(ctx); err != nil {
		t.Fatalf("second bootstrap: %v", err)
	}
	if err := s.WaitLeadership(ctx); err != nil {
		t.Fatal(err)
	}
	sub, cancel := s.SubscribeLeadership()
	defer cancel()
	if !recv(t, sub, "initial leadership") {
		t.Fatal("leader subscribed but got false")
	}
	mustShutdown(t, s)
	mustShutdown(t, s)

	// A last false (raft entering its shutdown state) may precede the close.
	for v := range sub {
		if v {
			t.Fatal("told it leads during shutdown")
		}
	}
	checks := map[string]error{}
	_, _, checks["apply"] = s.Apply(ctx, cmdKVPut, put("a=1"))
	_, _, checks["apply raw"] = s.ApplyRaw(ctx, encode(cmdKVPut, put("a=1")))
	checks["snapshot"] = s.Snapshot(ctx)
	checks["add voter"] = s.AddVoter(ctx, "n2", "127.0.0.1:1")
	checks["wait applied"] = s.WaitApplied(ctx, 1<<40)
	for name, err := range checks {
		if !errors.Is(err, ErrShutdown) && !errors.Is(err, ErrNoLeader) {
			t.Errorf("%s after shutdown: %v", name, err)
		}
	}
	if _, _, err := s.Apply(ctx, cmdKVPut, put("a=1")); !errors.Is(err, ErrShutdown) {
		t.Fatalf("apply after shutdown: %v, want ErrShutdown", err)
	}
	if s.State() != StateShutdown {
		t.Fatalf("state %v", s.State())
	}
}

func TestStore_ReadsAndIntrospection(t *testing.T) {
	kv := newKV()
	s := NewTestStore(t, kv)
	ctx := testCtx(t)
	if err := s.LinearizableRead(ctx); err != nil {
		t.Fatalf("first linearizable read: %v", err)
	}
	_, idx, err := s.Apply(ctx, cmdKVPut, put("a=1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.LinearizableRead(ctx); err != nil {
		t.Fatalf("linearizable read: %v", err)
	}
	if s.AppliedIndex() < idx {
		t.Fatal("linearizable read returned before the write was applied")
	}
	if err := s.VerifyLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitApplied(ctx, idx); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := s.WaitApplied(short, idx+1000); !errors.Is(err, ErrTimeout) {
		t.Fatalf("wait for a future index: %v", err)
	}
	if id, addr := s.Leader(); id != s.ID() || addr != s.Addr() || !s.IsLeader() || s.State() != StateLeader {
		t.Fatalf("leader %s@%s state %v", id, addr, s.State())
	}
	if id, _, err := s.WaitForLeader(ctx); err != nil || id != s.ID() {
		t.Fatalf("wait for leader: %s %v", id, err)
	}
	servers, err := s.Configuration(ctx)
	if err != nil || len(servers) != 1 || servers[0] != (Server{ID: s.ID(), Address: s.Addr(), Voter: true}) {
		t.Fatalf("configuration %+v %v", servers, err)
	}
	st := s.Stats()
	if st["state"] != "Leader" || st["node_id"] != s.ID() || st["modules"] != "kv" || st["fsm_applied_index"] == "" || st["log_store_entries"] == "0" {
		t.Fatalf("stats %v", st)
	}
}
