package backup_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/concordmap/concord/node/backup"
)

// TestRestore_LiveConnections restores a snapshot under connected agents,
// one whose session the snapshot holds and one it predates: the node keeps
// serving both, and a participant can connect again and work.
func TestRestore_LiveConnections(t *testing.T) {
	srv := startDev(t)
	first := dial(t, srv)
	call(t, first, "map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "name": "early"})
	call(t, first, "map/agents/register", map[string]any{"agentId": "early"})
	file := filepath.Join(t.TempDir(), "s.snap")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := backup.Save(ctx, adminConn(t, srv), file); err != nil {
		t.Fatal(err)
	}
	late := dial(t, srv)
	call(t, late, "map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "name": "late"})
	call(t, late, "map/agents/register", map[string]any{"agentId": "late"})
	if _, err := backup.Restore(ctx, adminConn(t, srv), file); err != nil {
		t.Fatal(err)
	}
	if _, ok := srv.Registry().Agent("late"); ok {
		t.Fatal("an agent registered after the snapshot survived the restore")
	}
	// A session in the snapshot goes on; one it predates gets a clear
	// error (its participant reconnects), never a crash.
	if _, err := first.Call(ctx, "map/agents/register", map[string]any{"agentId": "early-2"}); err != nil {
		t.Fatalf("session in the snapshot: %v", err)
	}
	if _, err := late.Call(ctx, "map/agents/register", map[string]any{"agentId": "late-2"}); err == nil {
		t.Fatal("a session the restore removed still writes")
	}
	again := dial(t, srv)
	call(t, again, "map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "name": "again"})
	call(t, again, "map/agents/register", map[string]any{"agentId": "again"})
}
