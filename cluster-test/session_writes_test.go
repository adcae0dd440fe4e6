package clustertest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/concordmap/concord/node/rpc"
)

// TestSessionWrites_LateUpdateForwardRefused: an agent's state update
// from its connection on a node cut off from the leader is on the wire
// (the forward stream blackholed, not closed), so the client is told
// "outcome unknown, retry" while the bytes wait; the client resumes its
// session on the leader and sets the state it wants now; then the network
// heals and the held update reaches the leader and commits, after both.
// It quotes the attach epoch of its connection, which the session has
// left: every replica refuses it, and the agent keeps the state its
// client set last (without the precondition it would flip back to the
// stale one).
func TestSessionWrites_LateUpdateForwardRefused(t *testing.T) {
	c := New(t, 3)
	l := c.Leader(t)
	f := c.Followers(t)
	grace := map[string]any{"agentBehavior": "grace-period", "gracePeriodMs": time.Minute.Milliseconds()}
	// x connects through f[1] and registers there: f[1]'s forward stream
	// to the leader is live, so the update below goes on it and the cut
	// holds it.
	x := c.Connect(t, f[1].Index, map[string]any{"participantType": "agent", "participantId": "x", "disconnectPolicy": grace})
	registerRetry(t, x, "x", nil)
	sess := x.Session()
	// f[1] applies the register before the cut: the update must not wait
	// for its read-your-writes fence there (it would time out, never sent).
	Eventually(t, ConvergeTimeout, func() error {
		if got, want := f[1].Store().AppliedIndex(), l.Store().AppliedIndex(); got < want {
			return fmt.Errorf("%s applied %d, the leader %d", f[1], got, want)
		}
		return nil
	})

	c.Net.Cut(f[1].ID, l.ID)
	_, err := x.Call("map/agents/update", map[string]any{"agentId": "x", "state": "busy"})
	var re *rpc.Error
	if !errors.As(err, &re) || !IsRetryable(err) || re.Data.Details["reason"] != "outcome_unknown" {
		// no_leader: f[1] lost the leader before it forwarded (a machine
		// too slow for the raft timings), so nothing is on the wire.
		t.Fatalf("update on %s, its forward held: want retryable %s, got %s", f[1], "outcome_unknown", Describe(err))
	}
	// The client gives up on f[1], resumes on the leader and decides
	// again: idle.
	a2, err := Dial(t, l.MAPURL(), c.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	a2.SetToken(c.Token())
	res, err := a2.Connect(map[string]any{"participantType": "agent", "participantId": "x",
		"sessionId": sess.SessionID, "resumeToken": sess.ResumeToken, "disconnectPolicy": grace})
	if err != nil || !res.Reconnected {
		t.Fatalf("resume on %s: %+v, %s", l, res, Describe(err))
	}
	if _, err := a2.Call("map/agents/update", map[string]any{"agentId": "x", "state": "idle"}); err != nil {
		t.Fatalf("update on %s: %s", l, Describe(err))
	}
	before := l.Store().AppliedIndex()
	c.Net.Heal() // the held update reaches the leader now
	Eventually(t, ConvergeTimeout, func() error {
		if n := l.Store().AppliedIndex(); n <= before {
			return fmt.Errorf("%s: nothing committed since the heal (applied %d)", l, n)
		}
		return nil
	})
	idle := func() error {
		for _, n := range c.Running() {
			a, ok := n.Server().Registry().Agent("x")
			if !ok || a.State != "idle" || a.HomeNode != l.ID || a.OwnerID != "x" {
				return fmt.Errorf("%s: agent x registered %v, state %q, home %q, owner %q; want idle on %s", n, ok, a.State, a.HomeNode, a.OwnerID, l)
			}
		}
		return nil
	}
	Eventually(t, ConvergeTimeout, idle)
	consistently(t, 3*time.Second, idle)
	c.RequireInvariants(t)
}
