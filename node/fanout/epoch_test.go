package fanout

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/concordmap/concord/node/registry"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestHub_SessionEpochGate: the hub's subscription writes quote the
// attach epoch of the connection they are made for (a subscribe's, then
// the one a later Attach of the session on this node brings: its cursor,
// detach flush and removal) once every server enforces
// registry.FSMLevelSessionWrites; below it they quote nothing, as before.
func TestHub_SessionEpochGate(t *testing.T) {
	for _, level := range []int{0, registry.FSMLevelResumeEpoch, registry.FSMLevelSessionWrites, registry.FSMLevelSessionWrites + 1} {
		t.Run(fmt.Sprintf("level %d", level), func(t *testing.T) {
			gated := func(ep uint64) uint64 {
				if level >= registry.FSMLevelSessionWrites {
					return ep
				}
				return 0
			}
			reg := newFakeRegistry(100)
			reg.addSession("s1", "p1")
			hs := newHarness(t, reg, func(c *Config) { c.FSMLevel = func(context.Context) int { return level } })
			c := hs.conn("s1")
			ctx := context.Background()
			res, err := hs.hub.Subscribe(ctx, "s1", 3, json.RawMessage(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			id := res.(SubscribeResult).SubscriptionID
			reg.appendEvent("agent_registered", "a")
			waitEvents(t, c, id, 1)
			hs.hub.flushCursors(ctx)

			// The session resumes on another connection of this node.
			if err := hs.hub.Attach(ctx, "s1", 5); err != nil {
				t.Fatal(err)
			}
			reg.appendEvent("agent_registered", "a")
			waitEvents(t, c, id, 2)
			hs.hub.Detach("s1")
			hs.hub.flushCursors(ctx)
			if _, err := hs.hub.Unsubscribe(ctx, "s1", 5, json.RawMessage(`{"subscriptionId":"`+id+`"}`)); err != nil {
				t.Fatal(err)
			}

			hs.prop.mu.Lock()
			cmds := hs.prop.cmds
			hs.prop.mu.Unlock()
			var got []uint64
			for _, m := range cmds {
				switch m := m.(type) {
				case *concordv1.SubscriptionAddRequest:
					got = append(got, m.GetSessionEpoch())
				case *concordv1.SubscriptionCursorRequest:
					for _, cur := range m.GetCursors() {
						got = append(got, cur.GetSessionEpoch())
					}
				case *concordv1.SubscriptionRemoveRequest:
					got = append(got, m.GetSessionEpoch())
				}
			}
			want := []uint64{gated(3), gated(3), gated(5), gated(5)} // add, cursor, detach's cursor, remove
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("quoted epochs %v (commands %v), want %v", got, cmds, want)
			}
		})
	}
}
