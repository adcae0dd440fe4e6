package clustertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/concordmap/concord/node/rpc"
)

// TestRouting_CrossNodeAddressForms sends between agents homed on
// different nodes with every address form and checks delivered[] is
// honest: exactly the resolved recipients, each of which receives the
// message exactly once, and nobody else.
//
//	a1 (node 1, role worker)      b2 (node 2, role worker)
//	 ├─ c3 (node 3, role lead)     d2 (node 2, child of a1)
//	scope "room": a1, b2, c3
func TestRouting_CrossNodeAddressForms(t *testing.T) {
	c := New(t, 3)
	agents := map[string]*Client{
		"a1": agentOn(t, c, 0, "a1", map[string]any{"role": "worker"}),
		"b2": agentOn(t, c, 1, "b2", map[string]any{"role": "worker"}),
		"c3": agentOn(t, c, 2, "c3", map[string]any{"role": "lead", "parent": "a1"}),
		"d2": agentOn(t, c, 1, "d2", map[string]any{"role": "helper", "parent": "a1"}),
	}
	agents["a1"].MustCall("map/scopes/create", map[string]any{"scopeId": "room", "name": "Room"})
	for _, id := range []string{"a1", "b2", "c3"} {
		agents[id].MustCall("map/scopes/join", map[string]any{"scopeId": "room", "agentId": id})
	}
	// Senders resolve addresses against their own replica.
	c.RequireConverged(t)

	tests := []struct {
		name string
		from string
		to   any
		want []string
	}{
		{"agent object", "a1", map[string]any{"agent": "b2"}, []string{"b2"}},
		{"agent string", "a1", "c3", []string{"c3"}},
		{"agent list", "b2", map[string]any{"agents": []string{"a1", "c3"}}, []string{"a1", "c3"}},
		{"scope", "b2", map[string]any{"scope": "room"}, []string{"a1", "c3"}},
		{"role", "c3", map[string]any{"role": "worker"}, []string{"a1", "b2"}},
		{"role within scope", "a1", map[string]any{"role": "lead", "within": "room"}, []string{"c3"}},
		{"parent", "c3", map[string]any{"parent": true}, []string{"a1"}},
		{"children", "a1", map[string]any{"children": true}, []string{"c3", "d2"}},
		{"siblings", "d2", map[string]any{"siblings": true}, []string{"c3"}},
		{"broadcast", "a1", map[string]any{"broadcast": true}, []string{"b2", "c3", "d2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload := map[string]any{"case": tt.name}
			res, err := agents[tt.from].Send(map[string]any{"to": tt.to, "payload": payload})
			if err != nil {
				t.Fatalf("send from %s to %v: %s", tt.from, tt.to, Describe(err))
			}
			if len(res.Failed) > 0 {
				t.Errorf("send from %s to %v: failed %+v", tt.from, tt.to, res.Failed)
			}
			if err := sameSet(res.Delivered, tt.want); err != nil {
				t.Errorf("delivered[]: %v", err)
			}
			for id, cl := range agents {
				want := 0
				for _, w := range tt.want {
					if w == id {
						want = 1
					}
				}
				if err := expectMessage(cl, res.MessageID, want); err != nil {
					t.Errorf("%s: %v", id, err)
				}
			}
		})
	}
	c.RequireInvariants(t)
}

// expectMessage waits until cl has received message id want times (for
// want 0: checks after a short grace period that it did not arrive).
func expectMessage(cl *Client, id string, want int) error {
	count := func() int {
		n := 0
		for _, m := range cl.Messages() {
			if m.ID == id {
				n++
			}
		}
		return n
	}
	if want == 0 {
		time.Sleep(50 * time.Millisecond) // a stray delivery would be in flight now
		if n := count(); n != 0 {
			return fmt.Errorf("received message %s %d times, want none", id, n)
		}
		return nil
	}
	return cl.in.wait(DeliveryTimeout, func() error {
		if n := count(); n != want {
			return fmt.Errorf("received message %s %d times, want %d", id, n, want)
		}
		return nil
	})
}

// TestRouting_DeadNodeDeliveryFailed kills the node an agent is connected
// to: a message to it fails with DELIVERY_FAILED (2003, retryable) within
// a bounded time, both before and after gossip has declared the node dead
// and the leader has detached its sessions.
func TestRouting_DeadNodeDeliveryFailed(t *testing.T) {
	c := New(t, 3)
	sender := agentOn(t, c, 0, "sender", nil)
	agentOn(t, c, 2, "remote", nil)
	c.RequireConverged(t)
	res, err := sender.Send(map[string]any{"to": map[string]any{"agent": "remote"}, "payload": "alive?"})
	if err != nil || len(res.Delivered) != 1 {
		t.Fatalf("send before the kill: %+v %s", res, Describe(err))
	}

	c.Kill(t, 2)
	start := time.Now()
	_, err = sender.Send(map[string]any{"to": map[string]any{"agent": "remote"}, "payload": "dead?"})
	took := time.Since(start)
	t.Logf("send to an agent on the killed node: %v after %v", Describe(err), took)
	requireMAPError(t, err, rpc.CodeDeliveryFailed, true)
	if took > UnavailableBound {
		t.Errorf("DELIVERY_FAILED took %v, want <= %v", took, UnavailableBound)
	}

	// Once the leader notices the death, the session is detached: still
	// DELIVERY_FAILED, and now at once.
	Eventually(t, MembershipTimeout, func() error {
		s, ok := sessionOfAgent(c.Node(0).Server().Registry(), "remote")
		if !ok || s.Connected {
			return fmt.Errorf("session of remote still connected: %+v", s)
		}
		return nil
	})
	start = time.Now()
	_, err = sender.Send(map[string]any{"to": "remote", "payload": "still dead?"})
	requireMAPError(t, err, rpc.CodeDeliveryFailed, true)
	if took := time.Since(start); took > time.Second {
		t.Errorf("DELIVERY_FAILED to a detached session took %v", took)
	}
	c.RequireInvariants(t)
}
