package raftstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// A full disk (acted out by the log write fault) fails writes with
// ErrDiskFull, reported by DiskFull, not a bare internal error; nothing
// acknowledged is lost; writes succeed again once space returns.
func TestStore_DiskFullFaultAndRecovery(t *testing.T) {
	kv := newKV()
	var full atomic.Bool
	cfg := TestConfig(t, "n1", kv)
	cfg.LogWriteFault = func() error {
		if full.Load() {
			return fmt.Errorf("write /data/raft.db: %w", syscall.ENOSPC)
		}
		return nil
	}
	s := StartTestStore(t, cfg)
	ctx := testCtx(t)
	for i := range 5 {
		if _, _, err := s.Apply(ctx, cmdKVPut, put(fmt.Sprintf("k%d=v", i))); err != nil {
			t.Fatal(err)
		}
	}

	full.Store(true)
	short, cancel := context.WithTimeout(ctx, scaled(2*time.Second))
	defer cancel()
	_, _, err := s.Apply(short, cmdKVPut, put("lost=1"))
	if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("Apply on a full disk = %v, want ErrDiskFull with the cause", err)
	}
	if err := s.DiskFull(); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("DiskFull = %v, want ErrDiskFull", err)
	}
	// The leader stepped down; while the disk stays full the next write
	// (no leader, or the failed append again) still names the disk.
	short2, cancel2 := context.WithTimeout(ctx, scaled(500*time.Millisecond))
	defer cancel2()
	if _, _, err := s.Apply(short2, cmdKVPut, put("lost=2")); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("second Apply on a full disk = %v, want ErrDiskFull", err)
	}
	if _, _, err := s.ApplyRaw(short2, encode(cmdKVPut, put("lost=3"))); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("ApplyRaw on a full disk = %v, want ErrDiskFull", err)
	}

	full.Store(false)
	eventually(t, scaled(10*time.Second), func() error {
		_, _, err := s.Apply(ctx, cmdKVPut, put("after=1"))
		return err
	})
	if err := s.DiskFull(); err != nil {
		t.Fatalf("DiskFull after recovery = %v", err)
	}
	for i := range 5 {
		if v, ok := kv.get(fmt.Sprintf("k%d", i)); !ok || v != "v" {
			t.Fatalf("acknowledged k%d = %q %v after the disk filled", i, v, ok)
		}
	}
	if _, ok := kv.get("lost"); ok {
		t.Fatal("a write refused for a full disk was applied")
	}
}

// The same on a real full disk: a small tmpfs (skipped where it cannot be
// mounted). A ballast file takes the space first; deleting it is "space
// returns".
func TestStore_DiskFullOnTmpfs(t *testing.T) {
	dir := mountTmpfs(t, "8m")
	kv := newKV()
	cfg := TestConfig(t, "n1", kv)
	cfg.DataDir = filepath.Join(dir, "data")
	s := StartTestStore(t, cfg)
	ctx := testCtx(t)
	ballast := filepath.Join(dir, "ballast")
	if err := os.WriteFile(ballast, make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 64<<10)
	var acked []string
	var err error
	for i := 0; i < 1000; i++ {
		key := fmt.Sprintf("k%03d", i)
		short, cancel := context.WithTimeout(ctx, scaled(3*time.Second))
		_, _, err = s.Apply(short, cmdKVPut, put(key+"="+big))
		cancel()
		if err != nil {
			break
		}
		acked = append(acked, key)
	}
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("filling the disk ended with %v, want ErrDiskFull", err)
	}
	t.Logf("disk full after %d writes of 64 KiB: %v", len(acked), err)
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	eventually(t, scaled(15*time.Second), func() error {
		_, _, err := s.Apply(ctx, cmdKVPut, put("after=1"))
		return err
	})
	for _, key := range acked {
		if v, ok := kv.get(key); !ok || v != big {
			t.Fatalf("acknowledged %s lost after the disk filled", key)
		}
	}
}

// mountTmpfs mounts a tmpfs of the given size on a temporary directory
// and unmounts it at cleanup; it skips the test where mounting is not
// allowed (not root, no mount(8), a container without the capability).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("tmpfs disk-full test skipped with -short")
	}
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s); the fault-injection test covers disk full", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// The space probe clears the record of a full disk once a scratch write
// succeeds, without waiting for a log write (a quiet follower has none).
func TestLogStore_SpaceProbe(t *testing.T) {
	l, err := openLogStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var full atomic.Bool
	full.Store(true)
	l.fault = func() error {
		if full.Load() {
			return syscall.ENOSPC
		}
		return nil
	}
	if err := l.noteFull(fmt.Errorf("write: %w", syscall.ENOSPC)); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("noteFull = %v, want ErrDiskFull", err)
	}
	if err := l.recheckFull(); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("recheck while still full = %v, want ErrDiskFull", err)
	}
	full.Store(false)
	if err := l.recheckFull(); err == nil {
		t.Fatal("a second probe within the interval ran")
	}
	l.lastProbe.Store(0) // let the interval pass
	if err := l.recheckFull(); err != nil {
		t.Fatalf("recheck with space back = %v, want nil", err)
	}
	if entries, _ := os.ReadDir(l.dir); len(entries) != 2 {
		t.Fatalf("data dir holds %d entries after the probe, want raft.db and the log dir alone", len(entries))
	}
}
