package raftstore

import (
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// cfgEntry is a configuration log entry naming "a" a voter and "b" with
// the given suffrage (absent when bSuffrage is -1).
func cfgEntry(index uint64, bSuffrage raft.ServerSuffrage) *raft.Log {
	servers := []raft.Server{{ID: "a", Address: "a:1", Suffrage: raft.Voter}}
	if bSuffrage >= 0 {
		servers = append(servers, raft.Server{ID: "b", Address: "b:1", Suffrage: bSuffrage})
	}
	return &raft.Log{Index: index, Term: 1, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(raft.Configuration{Servers: servers})}
}

func cmdEntry(index uint64) *raft.Log {
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("cmd-%d", index))}
}

// openPolicyStore opens a log store in dir for server "b" with the
// snapshots in dir.
func openPolicyStore(t *testing.T, dir string) (*logStore, *raft.FileSnapshotStore) {
	t.Helper()
	ls, err := openLogStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.initSyncPolicy("b", snaps, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	return ls, snaps
}

// durable reports whether everything appended is synced: no marker and no
// segment written without fdatasync.
func durable(t *testing.T, ls *logStore) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(ls.log.dir, unsyncedMarker))
	marker := err == nil
	ls.log.mu.RLock()
	defer ls.log.mu.RUnlock()
	for _, seg := range ls.log.segs {
		if seg.unsynced {
			return false
		}
	}
	return !marker
}

// Each step appends (or deletes, or creates a snapshot) and says whether
// the store must be lax afterwards; whenever it is not, everything written
// so far must be durable before the call returned.
func TestLogStore_NonvoterSyncPolicy(t *testing.T) {
	type step struct {
		name   string
		do     func(ls *logStore, snaps *raft.FileSnapshotStore) error
		lax    bool
		reopen bool // close cleanly and open again first
	}
	store := func(logs ...*raft.Log) func(*logStore, *raft.FileSnapshotStore) error {
		return func(ls *logStore, _ *raft.FileSnapshotStore) error { return ls.StoreLogs(logs) }
	}
	// snapshot creates a snapshot at index whose configuration (at
	// cfgIndex) gives "b" that suffrage.
	snapshot := func(index, cfgIndex uint64, s raft.ServerSuffrage) func(*logStore, *raft.FileSnapshotStore) error {
		return func(ls *logStore, snaps *raft.FileSnapshotStore) error {
			cfg, _ := decodeConfiguration(cfgEntry(cfgIndex, s).Data)
			_, trans := raft.NewInmemTransport("b:1")
			sink, err := policySnapshots{snaps, ls}.Create(raft.SnapshotVersionMax, index, 1, cfg, cfgIndex, trans)
			if err != nil {
				return err
			}
			return sink.Close()
		}
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"promotion syncs before returning", []step{
			{name: "fresh store is strict", do: store(cmdEntry(1))},
			{name: "non-voter config", do: store(cfgEntry(2, raft.Nonvoter), cmdEntry(3)), lax: true},
			{name: "appends", do: store(cmdEntry(4), cmdEntry(5)), lax: true},
			{name: "promotion in the middle of a batch", do: store(cmdEntry(6), cfgEntry(7, raft.Voter), cmdEntry(8))},
			{name: "stays strict", do: store(cmdEntry(9))},
		}},
		{"demotion and promotion in one batch", []step{
			{name: "non-voter", do: store(cfgEntry(1, raft.Nonvoter)), lax: true},
			{name: "voter last wins", do: store(cfgEntry(2, raft.Nonvoter), cfgEntry(3, raft.Voter))},
			{name: "demoted", do: store(cfgEntry(4, raft.Nonvoter)), lax: true},
		}},
		{"absent, staging or unreadable: strict", []step{
			{name: "non-voter", do: store(cfgEntry(1, raft.Nonvoter)), lax: true},
			{name: "absent", do: store(cfgEntry(2, -1))},
			{name: "non-voter again", do: store(cfgEntry(3, raft.Nonvoter)), lax: true},
			{name: "staging", do: store(cfgEntry(4, raft.Staging))},
			{name: "non-voter again", do: store(cfgEntry(5, raft.Nonvoter)), lax: true},
			{name: "unreadable", do: store(&raft.Log{Index: 6, Term: 1, Type: raft.LogConfiguration, Data: []byte{0xc1}})},
			{name: "non-voter again", do: store(cfgEntry(7, raft.Nonvoter)), lax: true},
			{name: "old peer change", do: store(&raft.Log{Index: 8, Term: 1, Type: raft.LogRemovePeerDeprecated})},
		}},
		{"truncation of the deciding entry", []step{
			{name: "voter", do: store(cfgEntry(1, raft.Voter), cmdEntry(2))},
			{name: "non-voter", do: store(cfgEntry(3, raft.Nonvoter), cmdEntry(4), cmdEntry(5)), lax: true},
			{name: "suffix after it kept", do: func(ls *logStore, _ *raft.FileSnapshotStore) error { return ls.DeleteRange(5, 5) }, lax: true},
			{name: "prefix compaction kept", do: func(ls *logStore, _ *raft.FileSnapshotStore) error { return ls.DeleteRange(1, 2) }, lax: true},
			{name: "suffix through it", do: func(ls *logStore, _ *raft.FileSnapshotStore) error { return ls.DeleteRange(3, 4) }},
			{name: "strict until a config says otherwise", do: store(cmdEntry(3))},
		}},
		{"snapshot configurations", []step{
			{name: "non-voter", do: store(cfgEntry(1, raft.Nonvoter), cmdEntry(2)), lax: true},
			{name: "older voter snapshot still makes it strict", do: snapshot(2, 0, raft.Voter)},
			{name: "non-voter again", do: store(cfgEntry(3, raft.Nonvoter)), lax: true},
			{name: "voter snapshot", do: snapshot(3, 3, raft.Voter)},
			{name: "newer non-voter snapshot", do: snapshot(3, 3, raft.Nonvoter), lax: true},
			{name: "appends", do: store(cmdEntry(4)), lax: true},
		}},
		{"startup", []step{
			{name: "fresh", do: store(cmdEntry(1))},
			{name: "non-voter", do: store(cfgEntry(2, raft.Nonvoter), cmdEntry(3)), lax: true},
			{name: "reopened: from the log", do: store(cmdEntry(4)), lax: true, reopen: true},
			{name: "voter snapshot below the entry", do: snapshot(1, 0, raft.Voter)},
			{name: "reopened: the entry is above the snapshot", do: store(cmdEntry(5)), lax: true, reopen: true},
			{name: "voter snapshot above the entry", do: snapshot(3, 2, raft.Voter)},
			{name: "reopened: the snapshot's voter configuration", do: store(cmdEntry(6)), reopen: true},
			{name: "non-voter snapshot, configuration unknown", do: snapshot(6, 6, raft.Nonvoter)},
			{name: "reopened: the two snapshots disagree", do: store(cmdEntry(7)), reopen: true},
			{name: "another non-voter snapshot", do: snapshot(7, 7, raft.Nonvoter)},
			{name: "reopened: both retained snapshots agree", do: store(cmdEntry(8)), lax: true, reopen: true},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ls, snaps := openPolicyStore(t, dir)
			defer func() { _ = ls.Close() }()
			for _, st := range tc.steps {
				if st.reopen {
					if err := ls.Close(); err != nil {
						t.Fatal(err)
					}
					if !durable(t, ls) {
						t.Fatalf("%s: not durable after Close", st.name)
					}
					ls, snaps = openPolicyStore(t, dir)
					if ls.setAside {
						t.Fatalf("%s: a cleanly closed log was set aside", st.name)
					}
				}
				before := ls.unsynced.Load()
				if err := st.do(ls, snaps); err != nil {
					t.Fatalf("%s: %v", st.name, err)
				}
				ls.pmu.Lock()
				lax := ls.policy.lax
				ls.pmu.Unlock()
				if lax != st.lax {
					t.Fatalf("%s: lax %v, want %v", st.name, lax, st.lax)
				}
				if !st.lax && !durable(t, ls) {
					t.Fatalf("%s: strict, but returned before everything was synced", st.name)
				}
				if ls.unsynced.Load() > before {
					if _, err := os.Stat(filepath.Join(ls.log.dir, unsyncedMarker)); err != nil {
						t.Fatalf("%s: appended unsynced without the marker", st.name)
					}
				}
			}
		})
	}
}

// A non-voter's log written unsynced and not closed (a crash) is set aside
// on open, even when torn in the middle; without the marker, damage in
// the middle still refuses to open.
func TestLogStore_UnsyncedLogSetAsideOnOpen(t *testing.T) {
	for _, marker := range []bool{true, false} {
		t.Run(fmt.Sprintf("marker=%v", marker), func(t *testing.T) {
			dir := t.TempDir()
			ls, _ := openPolicyStore(t, dir)
			ls.log.maxSeg = 256 // several segments
			var logs []*raft.Log
			logs = append(logs, cfgEntry(1, raft.Nonvoter))
			for i := uint64(2); i <= 40; i++ {
				logs = append(logs, cmdEntry(i))
			}
			for _, lg := range logs {
				if err := ls.StoreLogs([]*raft.Log{lg}); err != nil {
					t.Fatal(err)
				}
			}
			if ls.unsynced.Load() == 0 {
				t.Fatal("a non-voter's appends were all synced")
			}
			// The crash image: the files as they are now, not closed.
			crash := t.TempDir()
			copyTree(t, filepath.Join(dir, logDirName), filepath.Join(crash, logDirName))
			if err := ls.Close(); err != nil {
				t.Fatal(err)
			}
			if !marker {
				if err := os.Remove(filepath.Join(crash, logDirName, unsyncedMarker)); err != nil {
					t.Fatal(err)
				}
			}
			// Tear the first segment in the middle: a page that never
			// reached the disk.
			names, err := segmentNames(filepath.Join(crash, logDirName))
			if err != nil || len(names) < 3 {
				t.Fatalf("segments %v %v", names, err)
			}
			first := segPath(filepath.Join(crash, logDirName), names[0])
			if err := os.WriteFile(first, make([]byte, 64), 0o640); err != nil {
				t.Fatal(err)
			}
			re, err := openLogStore(crash)
			if !marker {
				if err == nil {
					_ = re.Close()
					t.Fatal("a damaged synced log opened")
				}
				return
			}
			if err != nil {
				t.Fatalf("open after a crash of an unsynced log: %v", err)
			}
			defer func() { _ = re.Close() }()
			if !re.setAside {
				t.Fatal("not set aside")
			}
			if last, _ := re.LastIndex(); last != 0 {
				t.Fatalf("last index %d, want an empty log", last)
			}
			if _, err := os.Stat(filepath.Join(crash, logDirName+setAsideSuffix, unsyncedMarker)); err != nil {
				t.Fatalf("set-aside log: %v", err)
			}
			// The fresh log takes appends from wherever the leader starts.
			if err := re.StoreLogs([]*raft.Log{cmdEntry(41)}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
}

// Under writes a non-voter appends without fsync and the voters with; once
// promoted (while writes go on), everything it holds is synced and it syncs
// every append, and it holds every committed write.
func TestCluster_NonvoterUnsyncedUntilPromoted(t *testing.T) {
	c := newTestCluster(t, 3)
	kv := newKV()
	nv := mustNew(t, clusterConfig(t, "nv", kv))
	t.Cleanup(func() { mustShutdown(t, nv) })
	leader := c.requireOneLeader(t, c.stores)
	if err := leader.AddNonvoter(testCtx(t), nv.ID(), nv.Addr()); err != nil {
		t.Fatal(err)
	}
	stopWrites := steadyWrites(t, leader, 4)
	defer stopWrites()
	eventually(t, waitTimeout, func() error {
		if n := nv.bolt.unsynced.Load(); n < 20 {
			return fmt.Errorf("non-voter wrote %d batches unsynced", n)
		}
		return nil
	})
	for _, s := range c.stores {
		if n := s.bolt.unsynced.Load(); n != 0 {
			t.Fatalf("voter %s wrote %d batches unsynced", s.ID(), n)
		}
	}
	if err := leader.AddVoter(testCtx(t), nv.ID(), nv.Addr()); err != nil {
		t.Fatal(err)
	}
	// AddVoter returns once the configuration is committed: the promoted
	// server stored it (and acknowledged it) before, so it is strict.
	eventually(t, waitTimeout, func() error {
		if !durable(t, nv.bolt) {
			return fmt.Errorf("promoted server's log not durable")
		}
		return nil
	})
	n0 := nv.bolt.unsynced.Load()
	b0 := nv.bolt.batches.Load()
	eventually(t, waitTimeout, func() error {
		if b := nv.bolt.batches.Load(); b < b0+20 {
			return fmt.Errorf("%d appends since the promotion", b-b0)
		}
		return nil
	})
	if n := nv.bolt.unsynced.Load(); n != n0 || !durable(t, nv.bolt) {
		t.Fatalf("promoted server wrote %d more batches unsynced", n-n0)
	}
	stopWrites()
	// A cancelled Apply may still commit: compare until both settle.
	eventually(t, waitTimeout, func() error {
		if got, want := kv.snapshotMap(), c.kvOf(leader).snapshotMap(); !maps.Equal(got, want) {
			return fmt.Errorf("promoted server holds %d keys, leader %d", len(got), len(want))
		}
		return nil
	})
}

// A non-voter that crashes with a torn unsynced log starts again (the log
// set aside, its snapshot kept) and catches up with every committed write.
func TestCluster_NonvoterRecoversFromTornUnsyncedLog(t *testing.T) {
	c := newTestCluster(t, 3)
	dir := t.TempDir()
	cfg := clusterConfig(t, "nv", newKV())
	cfg.DataDir = filepath.Join(dir, "live")
	nv := mustNew(t, cfg)
	leader := c.requireOneLeader(t, c.stores)
	if err := leader.AddNonvoter(testCtx(t), nv.ID(), nv.Addr()); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, _, err := leader.Apply(testCtx(t), cmdKVPut, put(fmt.Sprintf("k%d=%d", i, i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := nv.Snapshot(testCtx(t)); err != nil {
		t.Fatalf("non-voter snapshot: %v", err)
	}
	for i := 200; i < 300; i++ {
		if _, _, err := leader.Apply(testCtx(t), cmdKVPut, put(fmt.Sprintf("k%d=%d", i, i))); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, waitTimeout, func() error {
		if n := nv.bolt.unsynced.Load(); n == 0 {
			return fmt.Errorf("non-voter wrote nothing unsynced")
		}
		if idx := nv.raft.AppliedIndex(); idx < leader.raft.AppliedIndex() {
			return fmt.Errorf("non-voter applied %d, leader %d", idx, leader.raft.AppliedIndex())
		}
		return nil
	})
	// The crash image, taken while it runs; then tear its log.
	crash := filepath.Join(dir, "crashed")
	copyTree(t, cfg.DataDir, crash)
	mustShutdown(t, nv)
	logDir := filepath.Join(crash, logDirName)
	if _, err := os.Stat(filepath.Join(logDir, unsyncedMarker)); err != nil {
		t.Fatalf("crash image without the marker: %v", err)
	}
	names, err := segmentNames(logDir)
	if err != nil || len(names) == 0 {
		t.Fatalf("segments %v %v", names, err)
	}
	seg := segPath(logDir, names[len(names)-1])
	st, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(seg, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 512), st.Size()/3); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	// The next writes happen while it is down.
	for i := 300; i < 350; i++ {
		if _, _, err := leader.Apply(testCtx(t), cmdKVPut, put(fmt.Sprintf("k%d=%d", i, i))); err != nil {
			t.Fatal(err)
		}
	}

	kv := newKV()
	cfg = clusterConfig(t, "nv", kv)
	cfg.DataDir = crash
	cfg.BindAddr = nv.Addr()
	re := mustNew(t, cfg)
	t.Cleanup(func() { mustShutdown(t, re) })
	if !re.bolt.setAside {
		t.Fatal("torn unsynced log not set aside")
	}
	want := c.kvOf(leader).snapshotMap()
	eventually(t, waitTimeout, func() error {
		if got := kv.snapshotMap(); !maps.Equal(got, want) {
			return fmt.Errorf("restarted non-voter holds %d keys, leader %d", len(got), len(want))
		}
		return nil
	})
}
