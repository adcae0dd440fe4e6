package mapsvc

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node/registry"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

func TestOrphanWatch_Decision(t *testing.T) {
	const grace = 3 * time.Second
	t0 := time.UnixMilli(1_750_000_000_000)
	ghost := registry.HomedSession{ID: "s1", Epoch: 4}
	cases := []struct {
		name   string
		first  []registry.HomedSession // seen at t0
		then   []registry.HomedSession // seen at t0+after
		after  time.Duration
		held   bool // a local connection holds it, or is opening/resuming it
		detach bool
	}{
		{"connected here, no local conn, aged", []registry.HomedSession{ghost}, []registry.HomedSession{ghost}, grace, false, true},
		{"well past the grace", []registry.HomedSession{ghost}, []registry.HomedSession{ghost}, time.Hour, false, true},
		{"under the grace", []registry.HomedSession{ghost}, []registry.HomedSession{ghost}, grace - time.Millisecond, false, false},
		{"local conn or open in progress", []registry.HomedSession{ghost}, []registry.HomedSession{ghost}, time.Hour, true, false},
		{"first seen now", nil, []registry.HomedSession{ghost}, time.Hour, false, false},
		{"resumed since (new epoch)", []registry.HomedSession{ghost}, []registry.HomedSession{{ID: "s1", Epoch: 6}}, time.Hour, false, false},
		{"homed elsewhere or detached since", []registry.HomedSession{ghost}, nil, time.Hour, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newOrphanWatch(grace)
			none := func(string) bool { return false }
			if due := w.observe(t0, tc.first, none); len(due) != 0 {
				t.Fatalf("first pass detaches %v", due)
			}
			due := w.observe(t0.Add(tc.after), tc.then, func(string) bool { return tc.held })
			if got := len(due) == 1; got != tc.detach || len(due) > 1 {
				t.Fatalf("due = %v, want detach=%v", due, tc.detach)
			}
			if tc.detach && due[0] != tc.then[0] {
				t.Fatalf("due = %v, want %v", due[0], tc.then[0])
			}
		})
	}
}

// A session held for a while is no orphan: the grace starts again when
// the connection goes, and a zero grace still needs two passes.
func TestOrphanWatch_ClockRestartsAndTwoPasses(t *testing.T) {
	t0 := time.UnixMilli(1_750_000_000_000)
	s := []registry.HomedSession{{ID: "s1", Epoch: 1}}
	none := func(string) bool { return false }
	w := newOrphanWatch(time.Second)
	w.observe(t0, s, none)
	w.observe(t0.Add(500*time.Millisecond), s, func(string) bool { return true })
	if due := w.observe(t0.Add(2*time.Second), s, none); len(due) != 0 {
		t.Fatalf("held in between, yet due at once: %v", due)
	}
	if due := w.observe(t0.Add(3*time.Second), s, none); len(due) != 1 {
		t.Fatalf("not due a grace after the connection went: %v", due)
	}
	z := newOrphanWatch(0)
	if due := z.observe(t0, s, none); len(due) != 0 {
		t.Fatalf("zero grace detached on the first pass: %v", due)
	}
	if due := z.observe(t0, s, none); len(due) != 1 {
		t.Fatalf("zero grace: not due on the second pass: %v", due)
	}
}

func TestSessions_HeldWhileOpening(t *testing.T) {
	s := NewSessions()
	if s.held("s1") {
		t.Fatal("held before anything")
	}
	end1, end2 := s.beginOpen("s1"), s.beginOpen("s1")
	end1()
	if !s.held("s1") {
		t.Fatal("not held while a second open is in progress")
	}
	end2()
	if s.held("s1") {
		t.Fatal("still held after both opens ended")
	}
}

// A node that restarts (a new Service with an empty session table on the
// same replicated state) detaches the sessions of its previous run after
// the grace, with their disconnect policy; the participant still resumes.
func TestDetachOrphans_PreviousRun(t *testing.T) {
	const grace = 5 * time.Second
	e := newEnv(t, func(c *Config) { c.OrphanGrace = grace })
	c := e.dial()
	res := connectAs(c, TypeAgent, map[string]any{"disconnectPolicy": map[string]any{
		"agentBehavior": registry.BehaviorGracePeriod, "gracePeriodMs": 30_000}})
	sid, token := res["sessionId"].(string), res["resumeToken"].(string)
	c.must("map/agents/register", `{"agentId":"a1"}`)

	ctx := context.Background()
	// The live node never detaches a session one of its connections holds.
	e.svc.detachOrphans(ctx)
	e.clock.Advance(time.Hour)
	e.svc.detachOrphans(ctx)
	if s, _ := e.reg.Session(sid); !s.Connected {
		t.Fatal("a held session was detached")
	}

	// "Restart": same node id, same state, no connections.
	r := newEnvOn(t, e.reg, e.store, "n1", func(c *Config) { c.OrphanGrace = grace; c.Clock = e.clock.Now })
	r.svc.detachOrphans(ctx)
	e.clock.Advance(grace - time.Second)
	r.svc.detachOrphans(ctx)
	if s, _ := e.reg.Session(sid); !s.Connected {
		t.Fatal("detached under the grace")
	}
	e.clock.Advance(time.Second)
	r.svc.detachOrphans(ctx)
	s, _ := e.reg.Session(sid)
	if s.Connected || s.HomeNode != "" || s.ClosedAt != 0 {
		t.Fatalf("orphaned session not detached like a lost connection: %+v", s)
	}
	if a, _ := e.reg.Agent("a1"); a.State != registry.StateOrphaned {
		t.Fatalf("agent state %q, want %q (grace-period policy)", a.State, registry.StateOrphaned)
	}

	// The participant resumes within its policy window and gets its agent back.
	c2 := r.dial()
	res = connectAs(c2, TypeAgent, map[string]any{"sessionId": sid, "resumeToken": token, "reclaimAgents": []string{"a1"}})
	if res["reconnected"] != true {
		t.Fatalf("resume after the orphan detach: %v", res)
	}
	if s, _ := e.reg.Session(sid); !s.Connected || s.HomeNode != "n1" {
		t.Fatalf("not re-attached: %+v", s)
	}
	if a, _ := e.reg.Agent("a1"); a.State == registry.StateOrphaned || a.SessionID != sid {
		t.Fatalf("agent not reclaimed: %+v", a)
	}
	e.clock.Advance(time.Hour)
	r.svc.detachOrphans(ctx)
	r.svc.detachOrphans(ctx)
	if s, _ := e.reg.Session(sid); !s.Connected {
		t.Fatal("resumed session detached as an orphan")
	}
}

// hookedProposer runs after each committed command of one type.
type hookedProposer struct {
	Proposer
	t     concordv1.CommandType
	after func()
}

func (p hookedProposer) Apply(ctx context.Context, t concordv1.CommandType, m proto.Message) (any, uint64, error) {
	res, idx, err := p.Proposer.Apply(ctx, t, m)
	if err == nil && t == p.t {
		p.after()
	}
	return res, idx, err
}

// The registry shows a new or resumed session connected here as soon as
// its SESSION_OPEN is applied, before the connection holds it: orphan
// passes in that window, however late, leave it alone.
func TestDetachOrphans_OpenInProgress(t *testing.T) {
	for _, resume := range []bool{false, true} {
		t.Run(fmt.Sprintf("resume=%v", resume), func(t *testing.T) {
			var e *env
			var passes atomic.Int32
			e = newEnv(t, func(c *Config) {
				c.OrphanGrace = time.Second
				c.Store = hookedProposer{Proposer: c.Store, t: concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, after: func() {
					for range 3 {
						e.svc.detachOrphans(context.Background())
						e.clock.Advance(time.Hour)
						passes.Add(1)
					}
				}}
			})
			c := e.dial()
			res := connectAs(c, TypeAgent, nil)
			sid := res["sessionId"].(string)
			if resume {
				_ = c.conn.Close("drop")
				<-c.conn.Done()
				eventually(t, 5*time.Second, func() error {
					if s, _ := e.reg.Session(sid); s.Connected {
						return fmt.Errorf("not detached yet")
					}
					return nil
				})
				res = connectAs(e.dial(), TypeAgent, map[string]any{"sessionId": sid, "resumeToken": res["resumeToken"]})
				if res["reconnected"] != true {
					t.Fatalf("resume: %v", res)
				}
			}
			if passes.Load() == 0 {
				t.Fatal("the hook never ran")
			}
			if s, _ := e.reg.Session(sid); !s.Connected || s.HomeNode != "n1" {
				t.Fatalf("session detached while its open was in progress: %+v", s)
			}
		})
	}
}
