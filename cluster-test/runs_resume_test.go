package clustertest

import (
	"fmt"
	"testing"
	"time"
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
