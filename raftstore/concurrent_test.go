package raftstore

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestStore_ConcurrentAppliesGetTheirOwnResults(t *testing.T) {
	const (
		goroutines = 48
		perG       = 25
	)
	kv := newKV()
	s := NewTestStore(t, kv)
	ctx := testCtx(t)

	type outcome struct {
		g, i  int
		index uint64
		err   error
	}
	results := make(chan outcome, goroutines*perG)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				// Each goroutine owns key g: the result must be its own
				// previous value, which no other proposer writes.
				res, idx, err := s.Apply(ctx, cmdKVPut, put(fmt.Sprintf("g%d=%d", g, i)))
				if err == nil && i > 0 && res != fmt.Sprint(i-1) {
					err = fmt.Errorf("result %v, want %d", res, i-1)
				}
				if err == nil && i == 0 && res != "" {
					err = fmt.Errorf("first result %v", res)
				}
				results <- outcome{g: g, i: i, index: idx, err: err}
			}
		})
	}
	wg.Wait()
	close(results)

	seen := map[uint64]bool{}
	lastOf := map[int]uint64{}
	for r := range results {
		if r.err != nil {
			t.Fatalf("g%d #%d: %v", r.g, r.i, r.err)
		}
		if seen[r.index] {
			t.Fatalf("index %d returned twice", r.index)
		}
		seen[r.index] = true
		if r.index <= lastOf[r.g] {
			t.Fatalf("g%d indexes not increasing", r.g)
		}
		lastOf[r.g] = r.index
		// The entry at the returned index is exactly this proposer's command.
		if got, want := kv.at(r.index), fmt.Sprintf("g%d=%d", r.g, r.i); got != want {
			t.Fatalf("index %d holds %q, want %q", r.index, got, want)
		}
	}
	if len(seen) != goroutines*perG {
		t.Fatalf("%d distinct indexes, want %d", len(seen), goroutines*perG)
	}
	// Group commit: concurrent proposals share log writes (fsyncs).
	batches, entries := s.bolt.batches.Load(), s.bolt.entries.Load()
	t.Logf("%d log writes for %d entries", batches, entries)
	if batches >= entries {
		t.Fatalf("no group commit: %d writes for %d entries", batches, entries)
	}
}

func TestStore_ShutdownDrainsInflightApplies(t *testing.T) {
	s := mustNew(t, TestConfig(t, "n1", newKV()))
	ctx := testCtx(t)
	if err := s.BootstrapSelf(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitLeadership(ctx); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var once sync.Once
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				_, _, err := s.Apply(ctx, cmdKVPut, put(fmt.Sprintf("g%d=%d", g, i)))
				once.Do(func() { close(started) })
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	<-started
	mustShutdown(t, s)
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, ErrShutdown) {
			t.Fatalf("proposer ended with %v, want ErrShutdown", err)
		}
	}
}

// countingLayer is an injected StreamLayer (as a fault injector would be)
// over real TCP that counts dials.
type countingLayer struct {
	*tcpStreamLayer
	dials atomic.Int64
}

func (l *countingLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	l.dials.Add(1)
	return l.tcpStreamLayer.Dial(addr, timeout)
}

func TestStore_InjectedStreamLayer(t *testing.T) {
	var layers []*countingLayer
	var stores []*Store
	for i := range 2 {
		tcp, err := newTCPStreamLayer("127.0.0.1:0", "")
		if err != nil {
			t.Fatal(err)
		}
		l := &countingLayer{tcpStreamLayer: tcp}
		cfg := clusterConfig(t, fmt.Sprintf("n%d", i+1), newKV())
		cfg.BindAddr = "not used"
		cfg.StreamLayer = l
		s := mustNew(t, cfg)
		t.Cleanup(func() { mustShutdown(t, s) })
		if s.Addr() != tcp.Addr().String() {
			t.Fatalf("store address %s, layer address %s", s.Addr(), tcp.Addr())
		}
		layers, stores = append(layers, l), append(stores, s)
	}
	ctx := testCtx(t)
	if err := stores[0].BootstrapSelf(ctx); err != nil {
		t.Fatal(err)
	}
	if err := stores[0].WaitLeadership(ctx); err != nil {
		t.Fatal(err)
	}
	addVoters(t, stores[:1], stores[1])
	var idx uint64
	eventually(t, waitTimeout, func() error {
		for _, s := range stores {
			if s.IsLeader() {
				var err error
				_, idx, err = s.Apply(ctx, cmdKVPut, put("a=1"))
				return err
			}
		}
		return errors.New("no leader")
	})
	for _, s := range stores {
		if err := s.WaitApplied(ctx, idx); err != nil {
			t.Fatal(err)
		}
	}
	for i, l := range layers {
		if l.dials.Load() == 0 && stores[i].IsLeader() {
			t.Fatal("the leader did not dial through the injected layer")
		}
	}
}
