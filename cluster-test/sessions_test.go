package clustertest

import (
	"fmt"
	"slices"
	"testing"
)

// registeredIDs returns the agent ids of agent_registered events, in order,
// with their event ids.
func registeredIDs(evs []EventNote) (agents, eventIDs []string) {
	for _, e := range evs {
		if e.Event.Type != "agent_registered" {
			continue
		}
		var d struct {
			Agent struct {
				ID string `json:"id"`
			} `json:"agent"`
		}
		if err := jsonUnmarshal(e.Event.Data, &d); err == nil {
			agents = append(agents, d.Agent.ID)
			eventIDs = append(eventIDs, e.EventID)
		}
	}
	return agents, eventIDs
}

// waitRegistered waits until cl's subscription has seen agent_registered
// events for every id in want and returns the event id per agent.
func waitRegistered(t *testing.T, cl *Client, subID string, want ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	_, err := cl.WaitEvents(subID, DeliveryTimeout, func(evs []EventNote) error {
		agents, ids := registeredIDs(evs)
		for k, a := range agents {
			out[a] = ids[k]
		}
		for _, w := range want {
			if _, ok := out[w]; !ok {
				return fmt.Errorf("no agent_registered event for %s yet (have %v)", w, agents)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("subscription %s: %v", subID, err)
	}
	return out
}

// TestSessions_ResumeOnAnotherNode kills the node holding an agent's
// connection; the agent reconnects to another node with its sessionId and
// resumeToken: the session resumes (reconnected, same id), its
// subscription comes back and replays the events it missed with the same
// event ids a subscriber on a third node saw, sequence numbers keep
// increasing, and messages to the agent now reach it on its new node.
func TestSessions_ResumeOnAnotherNode(t *testing.T) {
	c := New(t, 3)
	sub := map[string]any{"filter": map[string]any{"eventTypes": []string{"agent_registered"}}}

	watcher := c.Connect(t, 1, map[string]any{"participantType": "client"})
	watchSub := subscribeRetry(t, watcher, sub)
	x := agentOn(t, c, 0, "x", nil)
	xSub := subscribeRetry(t, x, sub)
	y := agentOn(t, c, 1, "y", nil)
	registerRetry(t, y, "y0", nil)
	waitRegistered(t, x, xSub, "y0")
	before := x.Events(xSub)
	seqOf := map[string]uint64{}
	for _, e := range before {
		seqOf[e.EventID] = e.SequenceNumber
	}
	lastSeq := before[len(before)-1].SequenceNumber
	session := x.Session()

	c.Kill(t, 0)
	<-x.Done()
	c.Leader(t)
	registerRetry(t, y, "y1", nil)
	registerRetry(t, y, "y2", nil)
	seen := waitRegistered(t, watcher, watchSub, "y0", "y1", "y2")

	x2, err := Dial(t, c.Node(2).MAPURL(), c.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	x2.SetToken(c.Token())
	var res ConnectResult
	Eventually(t, MembershipTimeout, func() error {
		res, err = x2.Connect(map[string]any{
			"participantType": "agent", "participantId": "x",
			"sessionId": session.SessionID, "resumeToken": session.ResumeToken,
		})
		if err != nil && !IsRetryable(err) {
			return Permanent(err)
		}
		return err
	})
	if !res.Reconnected || res.SessionID != session.SessionID {
		t.Fatalf("resume on %s: want reconnected session %s, got %+v", c.Node(2), session.SessionID, res)
	}
	replayed := waitRegistered(t, x2, xSub, "y1", "y2")
	for _, id := range []string{"y1", "y2"} {
		if replayed[id] != seen[id] {
			t.Errorf("replayed event for %s has id %s, the watcher on %s saw %s", id, replayed[id], c.Node(1), seen[id])
		}
	}
	// Delivery is at-least-once from the persisted cursor: an event seen
	// before may come again with its old sequenceNumber; new ones continue
	// after the last one seen.
	for _, e := range x2.Events(xSub) {
		if seq, dup := seqOf[e.EventID]; dup {
			if e.SequenceNumber != seq {
				t.Errorf("event %s replayed with sequenceNumber %d, first delivered as %d", e.EventID, e.SequenceNumber, seq)
			}
			continue
		}
		if e.SequenceNumber <= lastSeq {
			t.Errorf("missed event %s replayed with sequenceNumber %d, not after %d", e.EventID, e.SequenceNumber, lastSeq)
		}
	}

	// The agent is homed on its new node: messages reach it there.
	Eventually(t, ConvergeTimeout, func() error {
		a, _ := c.Node(1).Server().Registry().Agent("x")
		if a.HomeNode != c.Node(2).ID {
			return fmt.Errorf("agent x homed on %q, want %s", a.HomeNode, c.Node(2).ID)
		}
		return nil
	})
	msg, err := y.Send(map[string]any{"to": map[string]any{"agent": "x"}, "payload": "welcome back"})
	if err != nil || !slices.Equal(msg.Delivered, []string{"x"}) {
		t.Fatalf("send to resumed x: %+v %s", msg, Describe(err))
	}
	if err := expectMessage(x2, msg.MessageID, 1); err != nil {
		t.Fatal(err)
	}
	c.RequireInvariants(t)
}
