package clustertest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/concordmap/concord/node/rpc"
)

// TestRuns_FailedResumeAttemptKeepsAgent is the failover step the run
// scenarios depend on, made deterministic: an agent's node stops serving
// it and its first reconnect attempt lands on a node cut off from the
// leader (the resume is refused, retryable); it then resumes on another
// node.
// When the socket of the failed attempt goes away, the live, resumed
// session must stay attached and keep owning its agent: otherwise the
// agent is orphaned (its run replies are refused with 1003, tasks are not
// delivered) and unregistered when the grace period ends, and the run
// eliminates it on its task timeout.
func TestRuns_FailedResumeAttemptKeepsAgent(t *testing.T) {
	c := New(t, 3)
	l := c.Leader(t)
	f := c.Followers(t)
	grace := map[string]any{"agentBehavior": "grace-period", "gracePeriodMs": time.Minute.Milliseconds()}
	x := c.Connect(t, f[0].Index, map[string]any{"participantType": "agent", "participantId": "x", "disconnectPolicy": grace})
	registerRetry(t, x, "x", nil)
	sess := x.Session()
	resume := map[string]any{"participantType": "agent", "participantId": "x",
		"sessionId": sess.SessionID, "resumeToken": sess.ResumeToken, "disconnectPolicy": grace}

	// The agent's node stops answering it (the session stays attached
	// there as far as the log knows: a dying node's detach never commits).
	// Attempt 1 reaches a node cut off from the leader.
	c.Net.Isolate(f[1].ID)
	a1, err := Dial(t, f[1].MAPURL(), c.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	a1.SetToken(c.Token())
	if _, err := a1.Connect(resume); err == nil || !IsRetryable(err) {
		t.Fatalf("resume on %s, cut off from the leader: want a retryable error, got %s", f[1], Describe(err))
	}
	c.Net.Heal()
	// Attempt 2 resumes on the leader.
	a2, err := Dial(t, l.MAPURL(), c.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	a2.SetToken(c.Token())
	res, err := a2.Connect(resume)
	if err != nil || !res.Reconnected {
		t.Fatalf("resume on %s: %+v, %s", l, res, Describe(err))
	}
	attached := func() error {
		for _, n := range c.Running() {
			s, ok := n.Server().Registry().Session(sess.SessionID)
			if !ok || !s.Connected || s.HomeNode != l.ID {
				return fmt.Errorf("%s: session %s connected %v on %q, want attached to %s", n, sess.SessionID, s.Connected, s.HomeNode, l)
			}
			if a, ok := n.Server().Registry().Agent("x"); !ok || a.OwnerID == "" || a.SessionID != sess.SessionID {
				return fmt.Errorf("%s: agent x registered %v, owner %q, session %s", n, ok, a.OwnerID, a.SessionID)
			}
		}
		return nil
	}
	Eventually(t, ConvergeTimeout, attached)
	// The failed attempt's socket goes away; the resumed session stays.
	a1.Close()
	consistently(t, 2*time.Second, attached)
	c.RequireInvariants(t)
}

// TestRuns_LateResumeForwardRefused is the race behind a rare failure of
// the test above, made deterministic: the resume on the node cut off from
// the leader is on the wire (its forward stream to the leader is
// blackholed, not closed), so its client is told "outcome unknown, retry"
// while the bytes wait; the client resumes on the leader; then the network
// heals and the held resume reaches the leader and commits, after the
// successful one. It quotes the epoch its node read, which the session has
// left: every replica refuses it, and the session stays with the client's
// live connection on the leader.
func TestRuns_LateResumeForwardRefused(t *testing.T) {
	c := New(t, 3)
	l := c.Leader(t)
	f := c.Followers(t)
	grace := map[string]any{"agentBehavior": "grace-period", "gracePeriodMs": time.Minute.Milliseconds()}
	x := c.Connect(t, f[0].Index, map[string]any{"participantType": "agent", "participantId": "x", "disconnectPolicy": grace})
	registerRetry(t, x, "x", nil)
	sess := x.Session()
	resume := map[string]any{"participantType": "agent", "participantId": "x",
		"sessionId": sess.SessionID, "resumeToken": sess.ResumeToken, "disconnectPolicy": grace}
	// A write through f[1] opens its forward stream to the leader: the
	// resume below goes on that live connection, which the cut holds.
	c.Connect(t, f[1].Index, map[string]any{"participantType": "client"})
	// ... and f[1] applies it before the cut: the resume must not wait for
	// its read-your-writes fence there (it would time out, never sent).
	Eventually(t, ConvergeTimeout, func() error {
		if got, want := f[1].Store().AppliedIndex(), l.Store().AppliedIndex(); got < want {
			return fmt.Errorf("%s applied %d, the leader %d", f[1], got, want)
		}
		return nil
	})
	a1, err := Dial(t, f[1].MAPURL(), c.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	a1.SetToken(c.Token())

	c.Net.Cut(f[1].ID, l.ID)
	_, err = a1.Connect(resume)
	var re *rpc.Error
	if !errors.As(err, &re) || !IsRetryable(err) || re.Data.Details["reason"] != "outcome_unknown" {
		// no_leader: f[1] lost the leader before it forwarded (a machine
		// too slow for the raft timings), so nothing is on the wire.
		t.Fatalf("resume on %s, its forward held: want retryable %s, got %s", f[1], "outcome_unknown", Describe(err))
	}
	a2, err := Dial(t, l.MAPURL(), c.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	a2.SetToken(c.Token())
	res, err := a2.Connect(resume)
	if err != nil || !res.Reconnected {
		t.Fatalf("resume on %s: %+v, %s", l, res, Describe(err))
	}
	before := l.Store().AppliedIndex()
	c.Net.Heal() // the held resume reaches the leader now
	Eventually(t, ConvergeTimeout, func() error {
		if n := l.Store().AppliedIndex(); n <= before {
			return fmt.Errorf("%s: nothing committed since the heal (applied %d)", l, n)
		}
		return nil
	})
	attached := func() error {
		for _, n := range c.Running() {
			s, ok := n.Server().Registry().Session(sess.SessionID)
			if !ok || !s.Connected || s.HomeNode != l.ID {
				return fmt.Errorf("%s: session %s connected %v on %q, want attached to %s", n, sess.SessionID, s.Connected, s.HomeNode, l)
			}
			if a, ok := n.Server().Registry().Agent("x"); !ok || a.OwnerID == "" || a.HomeNode != l.ID {
				return fmt.Errorf("%s: agent x registered %v, owner %q, home %q", n, ok, a.OwnerID, a.HomeNode)
			}
		}
		return nil
	}
	Eventually(t, ConvergeTimeout, attached)
	consistently(t, 3*time.Second, attached)
	a1.Close()
	consistently(t, time.Second, attached)
	c.RequireInvariants(t)
}
