package raftstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// entries returns raft entries lo..hi of the given term, each with its own
// data, and extensions on the even ones.
func entries(lo, hi, term uint64) []*raft.Log {
	var out []*raft.Log
	for i := lo; i <= hi; i++ {
		lg := &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, int(i%7)+1),
			AppendedAt: time.Unix(1_700_000_000, int64(i)).UTC()}
		if i%2 == 0 {
			lg.Extensions = []byte{0xee, byte(i)}
		}
		out = append(out, lg)
	}
	return out
}

func openSegLogT(t *testing.T, dir string, maxSeg int64) *segLog {
	t.Helper()
	l, err := openSegLog(dir)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if maxSeg > 0 {
		l.maxSeg = maxSeg
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func mustStore(t *testing.T, l *segLog, logs []*raft.Log) {
	t.Helper()
	if err := l.StoreLogs(logs); err != nil {
		t.Fatalf("store %d..: %v", logs[0].Index, err)
	}
}

// checkLog asserts the log spans first..last and every entry reads back
// with the term of want (index -> term).
func checkLog(t *testing.T, l *segLog, first, last uint64, term func(uint64) uint64) {
	t.Helper()
	f, _ := l.FirstIndex()
	g, _ := l.LastIndex()
	if f != first || g != last {
		t.Fatalf("log spans %d..%d, want %d..%d", f, g, first, last)
	}
	if first == 0 {
		return
	}
	for i := first; i <= last; i++ {
		var got raft.Log
		if err := l.GetLog(i, &got); err != nil {
			t.Fatalf("GetLog(%d): %v", i, err)
		}
		want := entries(i, i, term(i))[0]
		if got.Index != i || got.Term != want.Term || got.Type != want.Type || !bytes.Equal(got.Data, want.Data) ||
			!bytes.Equal(got.Extensions, want.Extensions) || !got.AppendedAt.Equal(want.AppendedAt) {
			t.Fatalf("entry %d read back as %+v, want %+v", i, got, *want)
		}
	}
	for _, i := range []uint64{first - 1, last + 1} {
		var got raft.Log
		if err := l.GetLog(i, &got); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("GetLog(%d) outside the log: %v", i, err)
		}
	}
}

func term1(uint64) uint64 { return 1 }

func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+segSuffix))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(m)
	return m
}

// TestSegLog_Operations runs raft's uses of the log (append, compaction,
// conflict truncation, full deletion for a snapshot install) with small
// segments, reopening after every step: the log must read back the same.
func TestSegLog_Operations(t *testing.T) {
	newTerm := func(from uint64) func(uint64) uint64 {
		return func(i uint64) uint64 {
			if i >= from {
				return 2
			}
			return 1
		}
	}
	tests := []struct {
		name        string
		run         func(t *testing.T, l *segLog)
		first, last uint64
		term        func(uint64) uint64
	}{
		{"append across segments", func(t *testing.T, l *segLog) {
			for lo := uint64(1); lo <= 40; lo += 5 {
				mustStore(t, l, entries(lo, lo+4, 1))
			}
		}, 1, 40, term1},
		{"prefix compaction inside and across segments", func(t *testing.T, l *segLog) {
			mustStore(t, l, entries(1, 40, 1)) // one segment: a batch is never split
			mustStore(t, l, entries(41, 60, 1))
			mustStore(t, l, entries(61, 80, 1))
			if err := l.DeleteRange(1, 50); err != nil {
				t.Fatal(err)
			}
			if got := len(segFiles(t, l.dir)); got != 2 {
				t.Fatalf("%d segments after compaction, want 2", got)
			}
		}, 51, 80, term1},
		{"conflict truncation then new term", func(t *testing.T, l *segLog) {
			mustStore(t, l, entries(1, 10, 1))
			mustStore(t, l, entries(11, 20, 1))
			mustStore(t, l, entries(21, 30, 1))
			if err := l.DeleteRange(15, 30); err != nil {
				t.Fatal(err)
			}
			mustStore(t, l, entries(15, 25, 2))
		}, 1, 25, newTerm(15)},
		{"truncation at a segment start", func(t *testing.T, l *segLog) {
			mustStore(t, l, entries(1, 10, 1))
			mustStore(t, l, entries(11, 20, 1))
			if err := l.DeleteRange(11, 20); err != nil {
				t.Fatal(err)
			}
			mustStore(t, l, entries(11, 12, 2))
		}, 1, 12, newTerm(11)},
		{"full deletion then a later start", func(t *testing.T, l *segLog) {
			mustStore(t, l, entries(1, 10, 1))
			if err := l.DeleteRange(5, 10); err != nil {
				t.Fatal(err)
			}
			if err := l.DeleteRange(1, 4); err != nil {
				t.Fatal(err)
			}
			mustStore(t, l, entries(100, 110, 1))
		}, 100, 110, term1},
		{"compaction then full deletion then a lower start", func(t *testing.T, l *segLog) {
			mustStore(t, l, entries(1, 30, 1))
			if err := l.DeleteRange(1, 20); err != nil {
				t.Fatal(err)
			}
			if err := l.DeleteRange(21, 30); err != nil {
				t.Fatal(err)
			}
			mustStore(t, l, entries(10, 12, 1))
		}, 10, 12, term1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openSegLogT(t, dir, 256)
			tc.run(t, l)
			checkLog(t, l, tc.first, tc.last, tc.term)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = openSegLogT(t, dir, 256)
			checkLog(t, l, tc.first, tc.last, tc.term)
			// The reopened log takes the next entry.
			mustStore(t, l, entries(tc.last+1, tc.last+1, tc.term(tc.last)))
			checkLog(t, l, tc.first, tc.last+1, tc.term)
		})
	}
}

// TestSegLog_RefusesGapsAndInnerDeletes: appends must continue the log and
// deletes must touch one end; both leave the log as it was.
func TestSegLog_RefusesGapsAndInnerDeletes(t *testing.T) {
	l := openSegLogT(t, t.TempDir(), 0)
	mustStore(t, l, entries(1, 10, 1))
	bad := [][]*raft.Log{entries(12, 12, 1), entries(10, 10, 1), append(entries(11, 11, 1), entries(13, 13, 1)...)}
	for _, logs := range bad {
		if err := l.StoreLogs(logs); err == nil {
			t.Fatalf("append of %d.. accepted", logs[0].Index)
		}
	}
	if err := l.DeleteRange(3, 5); err == nil {
		t.Fatal("delete inside the log accepted")
	}
	checkLog(t, l, 1, 10, term1)
}

// TestSegLog_TornTail: a crash during an append leaves part of a record,
// or zeros, after the last synced one; open drops it (never acknowledged)
// and the log continues from the last whole entry.
func TestSegLog_TornTail(t *testing.T) {
	tails := map[string]func(whole []byte) []byte{
		"half a record": func(whole []byte) []byte { return whole[:len(whole)/2] },
		"a header only": func(whole []byte) []byte { return whole[:recHeader] },
		"zeros":         func(whole []byte) []byte { return make([]byte, 64) },
		"bad checksum": func(whole []byte) []byte {
			b := slices.Clone(whole)
			b[len(b)-1] ^= 0xff
			return b
		},
	}
	for name, tail := range tails {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			l := openSegLogT(t, dir, 0)
			mustStore(t, l, entries(1, 5, 1))
			end := l.segs[len(l.segs)-1].size
			_ = l.Close()
			files := segFiles(t, dir)
			f, err := os.OpenFile(files[len(files)-1], os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			// At the log's end, inside the zero-filled reserve, as a
			// crash during the append would leave it.
			if _, err := f.WriteAt(tail(appendRecord(nil, entries(6, 6, 1)[0])), end); err != nil {
				t.Fatal(err)
			}
			_ = f.Close()
			l = openSegLogT(t, dir, 0)
			checkLog(t, l, 1, 5, term1)
			mustStore(t, l, entries(6, 7, 1))
			_ = l.Close()
			checkLog(t, openSegLogT(t, dir, 0), 1, 7, term1)
		})
	}
}

// TestSegLog_Reserve: the active segment is zero-filled ahead of its end
// (appends then overwrite allocated blocks); a full segment is cut back to
// its records before the next one starts, so only the last file ends in
// zeros; reopening drops the reserve and appends go on.
func TestSegLog_Reserve(t *testing.T) {
	fileSize := func(path string) int64 {
		t.Helper()
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	tests := []struct {
		name   string
		maxSeg int64
		batch  uint64
	}{
		{"one segment", 0, 10},
		{"rotating small segments", 300, 4},
		{"a batch larger than the reserve step", 64, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openSegLogT(t, dir, tt.maxSeg)
			for lo := uint64(1); lo <= 120; lo += tt.batch {
				mustStore(t, l, entries(lo, lo+tt.batch-1, 1))
			}
			last := 120 + (tt.batch-120%tt.batch)%tt.batch
			files := segFiles(t, dir)
			if len(files) != len(l.segs) {
				t.Fatalf("%d files for %d segments", len(files), len(l.segs))
			}
			for i, seg := range l.segs {
				got := fileSize(files[i])
				if i < len(l.segs)-1 && got != seg.size {
					t.Errorf("sealed segment %d: file is %d bytes, records end at %d", seg.base, got, seg.size)
				}
				if i == len(l.segs)-1 {
					if got <= seg.size || got != seg.alloc {
						t.Errorf("active segment: file is %d bytes, records end at %d, reserve %d", got, seg.size, seg.alloc)
					}
					b, err := os.ReadFile(files[i])
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(b[seg.size:], make([]byte, len(b)-int(seg.size))) {
						t.Error("the reserve is not all zeros")
					}
				}
			}
			checkLog(t, l, 1, last, term1)
			_ = l.Close()

			l = openSegLogT(t, dir, tt.maxSeg)
			checkLog(t, l, 1, last, term1)
			act := l.segs[len(l.segs)-1]
			if got := fileSize(files[len(files)-1]); got != act.size || act.alloc != act.size {
				t.Errorf("reopened: active file %d bytes, records end at %d, reserve %d", got, act.size, act.alloc)
			}
			mustStore(t, l, entries(last+1, last+3, 1))
			// A conflict truncation inside the active segment cuts the
			// reserve too; appends after it reserve again.
			if err := l.DeleteRange(last+2, last+3); err != nil {
				t.Fatal(err)
			}
			mustStore(t, l, entries(last+2, last+5, 2))
			_ = l.Close()
			checkLog(t, openSegLogT(t, dir, tt.maxSeg), 1, last+5, func(i uint64) uint64 {
				if i >= last+2 {
					return 2
				}
				return 1
			})
		})
	}
}

// TestSegLog_DamageIsAnError: damage that is not a torn tail (a bad record
// before the last segment, a gap between segments, a stray file) fails
// open instead of shortening the log.
// TestSegLog_UnsyncedAppendsSkipTheReserve: appends written without
// fdatasync (a non-voter's) do not zero-fill ahead, which would write
// every byte twice for no sync to save; a synced append reserves again,
// and the log reads back whole either way.
func TestSegLog_UnsyncedAppendsSkipTheReserve(t *testing.T) {
	dir := t.TempDir()
	l := openSegLogT(t, dir, 0)
	for lo := uint64(1); lo <= 40; lo += 10 {
		if err := l.storeLogs(entries(lo, lo+9, 1), false); err != nil {
			t.Fatal(err)
		}
	}
	seg := l.segs[0]
	st, err := os.Stat(segFiles(t, dir)[0])
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != seg.size || seg.alloc != seg.size {
		t.Fatalf("unsynced appends: file %d bytes, records end at %d, reserve %d; want no reserve", st.Size(), seg.size, seg.alloc)
	}
	mustStore(t, l, entries(41, 45, 1))
	if seg.alloc <= seg.size {
		t.Fatalf("synced append: reserve %d, records end at %d; want a reserve", seg.alloc, seg.size)
	}
	checkLog(t, l, 1, 45, term1)
	_ = l.Close()
	checkLog(t, openSegLogT(t, dir, 0), 1, 45, term1)
}

func TestSegLog_DamageIsAnError(t *testing.T) {
	build := func(t *testing.T) (string, []string) {
		dir := t.TempDir()
		l := openSegLogT(t, dir, 64)
		for i := uint64(1); i <= 6; i += 2 {
			mustStore(t, l, entries(i, i+1, 1))
		}
		_ = l.Close()
		files := segFiles(t, dir)
		if len(files) < 3 {
			t.Fatalf("%d segments, want 3", len(files))
		}
		return dir, files
	}
	damage := map[string]func(t *testing.T, dir string, files []string){
		"flipped byte in the first segment": func(t *testing.T, _ string, files []string) {
			b, _ := os.ReadFile(files[0])
			b[recHeader+2] ^= 0xff
			if err := os.WriteFile(files[0], b, 0o640); err != nil {
				t.Fatal(err)
			}
		},
		"middle segment missing": func(t *testing.T, _ string, files []string) {
			if err := os.Remove(files[1]); err != nil {
				t.Fatal(err)
			}
		},
		"stray segment name": func(t *testing.T, dir string, _ []string) {
			if err := os.WriteFile(filepath.Join(dir, "junk"+segSuffix), nil, 0o640); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, hurt := range damage {
		t.Run(name, func(t *testing.T) {
			dir, files := build(t)
			hurt(t, dir, files)
			if l, err := openSegLog(dir); !errors.Is(err, errSegCorrupt) {
				if l != nil {
					_ = l.Close()
				}
				t.Fatalf("open of a damaged log: %v, want errSegCorrupt", err)
			}
		})
	}
}

// TestLogStore_MigratesBoltLog: entries an older version kept in raft.db
// move to the segment log, also when a first move was cut short (entries
// are removed from raft.db only after all are synced in the segment log).
func TestLogStore_MigratesBoltLog(t *testing.T) {
	for _, interrupted := range []bool{false, true} {
		dir := t.TempDir()
		bs, err := raftboltdb.NewBoltStore(filepath.Join(dir, "raft.db"))
		if err != nil {
			t.Fatal(err)
		}
		if err := bs.StoreLogs(entries(5, 2100, 3)); err != nil {
			t.Fatal(err)
		}
		if err := bs.SetUint64([]byte("CurrentTerm"), 3); err != nil {
			t.Fatal(err)
		}
		_ = bs.Close()
		if interrupted {
			// A partial copy, as a crash during the first move leaves it.
			sl := openSegLogT(t, filepath.Join(dir, logDirName), 0)
			mustStore(t, sl, entries(5, 900, 3))
			_ = sl.Close()
		}
		ls, err := openLogStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		checkLog(t, ls.log, 5, 2100, func(uint64) uint64 { return 3 })
		if last, _ := ls.stable.LastIndex(); last != 0 {
			t.Fatalf("raft.db still holds log entries up to %d", last)
		}
		if term, err := ls.GetUint64([]byte("CurrentTerm")); err != nil || term != 3 {
			t.Fatalf("term after the move: %d %v", term, err)
		}
		_ = ls.Close()
	}
}

// FuzzSegLogOpen: whatever bytes the last segment holds, open either fails
// cleanly or yields a log whose every entry reads back.
func FuzzSegLogOpen(f *testing.F) {
	f.Add(appendRecord(nil, entries(1, 1, 1)[0]))
	f.Add(append(appendRecord(nil, entries(1, 1, 1)[0]), 1, 2, 3))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(segPath(dir, 1), data, 0o640); err != nil {
			t.Fatal(err)
		}
		l, err := openSegLog(dir)
		if err != nil {
			return
		}
		defer l.Close()
		first, _ := l.FirstIndex()
		last, _ := l.LastIndex()
		for i := first; first != 0 && i <= last; i++ {
			var lg raft.Log
			if err := l.GetLog(i, &lg); err != nil {
				t.Fatalf("GetLog(%d) of an opened log: %v", i, err)
			}
		}
		if err := l.StoreLogs(entries(last+1, last+1, 1)); err != nil {
			t.Fatalf("append after open: %v", err)
		}
	})
}

// BenchmarkSegLog_UnsyncedAppend appends a non-voter's paced batch (100
// entries of ~300 bytes) without fdatasync, as nvsync.go does.
func BenchmarkSegLog_UnsyncedAppend(b *testing.B) {
	l, err := openSegLog(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	data := bytes.Repeat([]byte{7}, 300)
	batch := make([]*raft.Log, 100)
	next := uint64(1)
	b.SetBytes(int64(len(batch) * len(data)))
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	defer func() {
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
		cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}()
	for b.Loop() {
		for i := range batch {
			batch[i] = &raft.Log{Index: next, Term: 1, Type: raft.LogCommand, Data: data}
			next++
		}
		if err := l.storeLogs(batch, false); err != nil {
			b.Fatal(err)
		}
	}
}
