package node_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/concordmap/concord/node"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestServer_RestartDetachesSessionsOfPreviousRun: a node that crashes
// with a participant connected, and restarts before gossip notices (here:
// a single node, which the leader's reconciler never sees fail), comes
// back with the session connected and homed on itself in the replicated
// state and nothing behind it. A graceful stop detaches its sessions, so
// the crash's leftover is written as the SESSION_OPEN of a connection that
// died with the process. The node's own periodic pass detaches it after
// the session detach grace, with its disconnect policy, and the
// participant still resumes it.
func TestServer_RestartDetachesSessionsOfPreviousRun(t *testing.T) {
	const grace = time.Second
	dir := t.TempDir()
	cfg := func() node.Config {
		c := node.DevConfig(dir)
		secure(&c)
		c.Cluster.SessionDetachGrace = grace
		return c
	}
	srv := startConfig(t, cfg())
	sid := ulid.Make().String()
	token := sid + ".secret-of-the-crashed-connection"
	hash := sha256.Sum256([]byte(token))
	meta := func(n int) *concordv1.CommandMeta {
		m := &concordv1.CommandMeta{TimestampMs: time.Now().UnixMilli(), NodeId: srv.Store().ID()}
		for range n {
			m.EventIds = append(m.EventIds, ulid.Make().String())
		}
		return m
	}
	if _, _, err := srv.Store().Apply(t.Context(), concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, &concordv1.SessionOpenRequest{
		Meta: meta(1),
		Session: &concordv1.SessionRecord{Id: sid, ParticipantId: "crash", ParticipantType: "agent", HomeNode: srv.Store().ID(),
			DisconnectPolicy: &concordv1.DisconnectPolicyRecord{AgentBehavior: "grace-period", GracePeriodMs: 600_000}, ResumeTokenHash: hash[:]},
	}); err != nil {
		t.Fatalf("open the crash-left session: %v", err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	started := time.Now() // the node's pass may run before Start returns
	srv2 := startConfig(t, cfg())
	if s, _ := srv2.Registry().Session(sid); !s.Connected {
		t.Fatalf("crash-left session not connected after the restart: %+v", s)
	}
	eventually(t, grace+10*time.Second, func() error {
		if s, _ := srv2.Registry().Session(sid); s.Connected {
			return fmt.Errorf("session of the previous run still connected, home %q, with no connection", s.HomeNode)
		}
		return nil
	})
	if d := time.Since(started); d < grace {
		t.Fatalf("detached %v after the restart, before the grace %v", d, grace)
	}
	c := dial(t, srv2)
	res := c.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "sessionId": sid, "resumeToken": token})
	if res["reconnected"] != true || res["sessionId"] != sid {
		t.Fatalf("resume after the detach: %v", res)
	}
}
