package clustertest

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
)

// TestSnapshot_RestoredGhostSessionDetached: a snapshot taken while a
// participant was connected, restored after it left, brings its session
// back connected and homed on a live node that has no connection for it.
// Before, nothing ever detached it (the leader only detaches sessions of
// failed nodes): the participant stayed "connected" and its agents
// reachable, forever. Now its home node detaches it once it has been so
// for the session detach grace, with its disconnect policy, and the
// participant can still resume it.
func TestSnapshot_RestoredGhostSessionDetached(t *testing.T) {
	const grace = 2 * time.Second
	a := New(t, 3, WithNodeConfig(func(_ int, c *node.Config) { c.Cluster.SessionDetachGrace = grace }))
	home := a.Followers(t)[0]
	cl, err := dialTLS(t, home.MAPURL(), a.Ledger, tlstest.ClientTLS(a.SystemID(), ""))
	if err != nil {
		t.Fatal(err)
	}
	cl.SetToken(a.Token())
	res, err := cl.Connect(map[string]any{"participantId": "ghost",
		"disconnectPolicy": map[string]any{"agentBehavior": "grace-period", "gracePeriodMs": 600_000}})
	if err != nil {
		t.Fatalf("connect: %s", Describe(err))
	}
	if err := cl.Register("ghost-agent", nil); err != nil {
		t.Fatalf("register: %s", Describe(err))
	}
	sessionOn := func(n *Node) registry.Session {
		s, _ := n.Server().Registry().Session(res.SessionID)
		return s
	}
	Eventually(t, ConvergeTimeout, func() error {
		for _, n := range a.Running() {
			if _, ok := n.Server().Registry().Agent("ghost-agent"); !ok {
				return fmt.Errorf("agent not applied on %s", n)
			}
		}
		return nil
	})
	path := filepath.Join(t.TempDir(), "connected.snap")
	saveSnapshot(t, home, path)
	cl.Close()
	Eventually(t, ConvergeTimeout, func() error {
		if s := sessionOn(home); s.Connected {
			return fmt.Errorf("session still connected after its connection closed")
		}
		return nil
	})

	restoring := time.Now() // the home node may apply the restore before restoreSnapshot returns
	restoreSnapshot(t, a, home, path)
	if s := sessionOn(home); time.Since(restoring) < grace && (!s.Connected || s.HomeNode != home.ID) {
		t.Fatalf("restored session %+v, want connected on %s (the snapshot's state)", s, home.ID)
	}
	Eventually(t, grace+10*time.Second, func() error {
		for _, n := range a.Running() {
			if s := sessionOn(n); s.Connected || s.HomeNode != "" {
				return fmt.Errorf("%s: session still connected=%v home=%q with no connection", n, s.Connected, s.HomeNode)
			}
			if ag, _ := n.Server().Registry().Agent("ghost-agent"); ag.State != registry.StateOrphaned {
				return fmt.Errorf("%s: agent %q, want orphaned (grace-period policy)", n, ag.State)
			}
		}
		return nil
	})
	if d := time.Since(restoring); d < grace {
		t.Fatalf("detached %v after the restore, before the grace %v", d, grace)
	}

	// The participant resumes within its policy window and reclaims its agent.
	back, err := dialTLS(t, a.Node(0).MAPURL(), a.Ledger, tlstest.ClientTLS(a.SystemID(), ""))
	if err != nil {
		t.Fatal(err)
	}
	back.SetToken(a.Token())
	r, err := back.Connect(map[string]any{"sessionId": res.SessionID, "resumeToken": res.ResumeToken, "reclaimAgents": []string{"ghost-agent"}})
	if err != nil || !r.Reconnected {
		t.Fatalf("resume after the detach: %+v %s", r, Describe(err))
	}
	Eventually(t, ConvergeTimeout, func() error {
		if ag, _ := a.Node(0).Server().Registry().Agent("ghost-agent"); ag.State == registry.StateOrphaned || ag.SessionID != res.SessionID {
			return fmt.Errorf("agent not reclaimed: %+v", ag)
		}
		return nil
	})
}
