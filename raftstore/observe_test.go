package raftstore

import (
	"sync"
	"testing"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// ObserveApply sees every command a module handled, with its type, and
// nothing for raftstore's own NOOPs.
func TestStore_ObserveApply(t *testing.T) {
	var mu sync.Mutex
	seen := map[concordv1.CommandType]int{}
	cfg := TestConfig(t, "obs", newKV(), &listModule{})
	cfg.ObserveApply = func(ct concordv1.CommandType, d time.Duration) {
		if d < 0 {
			t.Errorf("negative apply time %v", d)
		}
		mu.Lock()
		seen[ct]++
		mu.Unlock()
	}
	s := StartTestStore(t, cfg)
	ctx := testCtx(t)
	for _, step := range []struct {
		ct  concordv1.CommandType
		arg string
	}{{cmdKVPut, "a=1"}, {cmdKVPut, "a=2"}, {cmdLogAdd, "x"}, {concordv1.CommandType_COMMAND_TYPE_NOOP, ""}} {
		var err error
		if step.ct == concordv1.CommandType_COMMAND_TYPE_NOOP {
			_, _, err = s.Apply(ctx, step.ct, &concordv1.Noop{})
		} else {
			_, _, err = s.Apply(ctx, step.ct, put(step.arg))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if seen[cmdKVPut] != 2 || seen[cmdLogAdd] != 1 || seen[concordv1.CommandType_COMMAND_TYPE_NOOP] != 0 {
		t.Fatalf("observed %v, want 2 puts, 1 add, no NOOP", seen)
	}
}
