package raftstore

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// TestLogStore_ReopenAfterTruncation: entries, a head truncation (as after
// a snapshot) and raft's term survive a reopen; the freelist, which is not
// synced (NoFreelistSync), is rebuilt on open.
func TestLogStore_ReopenAfterTruncation(t *testing.T) {
	dir := t.TempDir()
	ls, err := openLogStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	var logs []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{byte(i)}})
	}
	if err := ls.StoreLogs(logs[:6]); err != nil {
		t.Fatal(err)
	}
	if err := ls.StoreLogs(logs[6:]); err != nil {
		t.Fatal(err)
	}
	if ls.batches.Load() != 2 || ls.entries.Load() != 10 {
		t.Fatalf("counted %d batches, %d entries", ls.batches.Load(), ls.entries.Load())
	}
	if err := ls.DeleteRange(1, 3); err != nil {
		t.Fatal(err)
	}
	if err := ls.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if err := ls.Close(); err != nil {
		t.Fatal(err)
	}
	ls, err = openLogStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ls.Close() }()
	first, _ := ls.FirstIndex()
	last, _ := ls.LastIndex()
	if first != 4 || last != 10 {
		t.Fatalf("after reopen: first %d last %d, want 4 10", first, last)
	}
	var l raft.Log
	if err := ls.GetLog(7, &l); err != nil || l.Data[0] != 7 {
		t.Fatalf("GetLog(7): %v %v", l.Data, err)
	}
	if err := ls.GetLog(2, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog of a truncated entry: %v", err)
	}
	if term, err := ls.GetUint64([]byte("CurrentTerm")); err != nil || term != 7 {
		t.Fatalf("term after reopen: %d %v", term, err)
	}
	// New appends reuse the pages the truncation freed.
	if err := ls.StoreLogs([]*raft.Log{{Index: 11, Term: 2, Type: raft.LogCommand, Data: []byte{11}}}); err != nil {
		t.Fatal(err)
	}
}
