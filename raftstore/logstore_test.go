package raftstore

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// TestLogStore_Kinds: both kinds store, read, truncate and keep raft's
// term across a reopen, and count batches and entries.
func TestLogStore_Kinds(t *testing.T) {
	for _, kind := range []string{LogStoreWAL, LogStoreBolt} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			ls, err := openLogStore(dir, kind, hclog.NewNullLogger())
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
			if err := ls.DeleteRange(1, 3); err != nil { // head truncation after a snapshot
				t.Fatal(err)
			}
			if err := ls.SetUint64([]byte("CurrentTerm"), 7); err != nil {
				t.Fatal(err)
			}
			if err := ls.Close(); err != nil {
				t.Fatal(err)
			}
			ls, err = openLogStore(dir, kind, hclog.NewNullLogger())
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
			if got, want := ls.IsMonotonic(), kind == LogStoreWAL; got != want {
				t.Fatalf("IsMonotonic %v, want %v", got, want)
			}
		})
	}
}

// TestLogStore_ExistingLogDecidesKind: a data dir keeps the kind its log
// was created with; only a new one follows the configured kind.
func TestLogStore_ExistingLogDecidesKind(t *testing.T) {
	tests := []struct {
		created, configured, want string
		file                      string
	}{
		{LogStoreBolt, LogStoreWAL, LogStoreBolt, boltFileName},
		{LogStoreWAL, LogStoreBolt, LogStoreWAL, walDirName},
		{LogStoreWAL, LogStoreWAL, LogStoreWAL, walDirName},
	}
	for _, tt := range tests {
		t.Run(tt.created+"-then-"+tt.configured, func(t *testing.T) {
			dir := t.TempDir()
			ls, err := openLogStore(dir, tt.created, hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, tt.file)); err != nil {
				t.Fatalf("%s log not at %s: %v", tt.created, tt.file, err)
			}
			if err := ls.Close(); err != nil {
				t.Fatal(err)
			}
			ls, err = openLogStore(dir, tt.configured, hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = ls.Close() }()
			if ls.kind != tt.want {
				t.Fatalf("kind %s, want %s", ls.kind, tt.want)
			}
		})
	}
}

func TestLogStore_UnknownKind(t *testing.T) {
	if _, err := openLogStore(t.TempDir(), "tape", hclog.NewNullLogger()); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("unknown kind: %v", err)
	}
	cfg := TestConfig(t, "n1")
	cfg.LogStore = "tape"
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate: %v", err)
	}
}
