package runs

import (
	"context"
	"testing"
	"time"

	"github.com/concordmap/concord/node/registry"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// TestStore_SnapshotAndRestartRecoverRuns: through the real store, a node
// that restarts from its snapshot plus the log after it holds exactly the
// runs (and run events) it had before.
func TestStore_SnapshotAndRestartRecoverRuns(t *testing.T) {
	log := scenario(t, newReplica(t))
	newModules := func() (*registry.State, *Module) {
		r := newReplica(t)
		return r.reg, r.mod
	}
	reg, mod := newModules()
	cfg := raftstore.TestConfig(t, "n1", reg, mod)
	store := raftstore.StartTestStore(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last uint64
	for i, s := range log {
		_, index, err := store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_RUN_INPUT, s.in)
		if (err == nil) != (s.err == "") {
			t.Fatalf("input %d: err %v, want %q", i, err, s.err)
		}
		last = index
		if i == len(log)/2 {
			if err := store.Snapshot(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := dump(t, mod, reg)
	if err := store.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	reg2, mod2 := newModules()
	cfg.Modules = []raftstore.Module{reg2, mod2}
	cfg.BindAddr = "127.0.0.1:0"
	restarted := raftstore.StartTestStore(t, cfg)
	if err := restarted.WaitApplied(ctx, last); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, mod2, reg2); got != want {
		t.Fatalf("state after restart differs:\n got %.1500s\nwant %.1500s", got, want)
	}
}
