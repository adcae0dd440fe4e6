package mapsvc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// originWrites are the command types whose origin_session_id and
// origin_session_epoch mapsvc fills for a connection's write.
var originWrites = []concordv1.CommandType{
	concordv1.CommandType_COMMAND_TYPE_AGENT_UPDATE,
	concordv1.CommandType_COMMAND_TYPE_AGENT_UNREGISTER,
	concordv1.CommandType_COMMAND_TYPE_SCOPE_CREATE,
	concordv1.CommandType_COMMAND_TYPE_SCOPE_DELETE,
	concordv1.CommandType_COMMAND_TYPE_SCOPE_JOIN,
	concordv1.CommandType_COMMAND_TYPE_SCOPE_LEAVE,
}

// originOf reads the origin fields of one of the originWrites.
func originOf(m proto.Message) (string, uint64) {
	type origin interface {
		GetOriginSessionId() string
		GetOriginSessionEpoch() uint64
	}
	o := m.(origin)
	return o.GetOriginSessionId(), o.GetOriginSessionEpoch()
}

// writeRecorder is the store as a Proposer that records the originWrites
// proposed through it and may run a write of another node first (the
// session moving on while the write is held on its way to the leader).
type writeRecorder struct {
	store  *raftstore.Store
	mu     sync.Mutex
	seen   []proto.Message
	before func(m proto.Message)
}

func (r *writeRecorder) Apply(ctx context.Context, t concordv1.CommandType, m proto.Message) (any, uint64, error) {
	if slices.Contains(originWrites, t) {
		r.mu.Lock()
		r.seen = append(r.seen, proto.Clone(m))
		before := r.before
		r.mu.Unlock()
		if before != nil {
			before(m)
		}
	}
	return r.store.Apply(ctx, t, m)
}

func (r *writeRecorder) writes() []proto.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

func newWritesEnv(t *testing.T, level int) (*env, *writeRecorder) {
	t.Helper()
	var rec *writeRecorder
	e := newEnv(t, func(c *Config) {
		rec = &writeRecorder{store: c.Store.(*raftstore.Store)}
		c.Store = rec
		c.FSMLevel = func(context.Context) int { return level }
	})
	return e, rec
}

// sessionWritesSetup: agent-a registered by its own connection, scopes
// "in" (agent-a a member) and "out".
func sessionWritesSetup(c *client) {
	c.must("map/agents/register", `{"agentId":"agent-a","name":"A"}`)
	c.must("map/scopes/create", `{"scopeId":"in"}`)
	c.must("map/scopes/create", `{"scopeId":"out"}`)
	c.must("map/scopes/join", `{"scopeId":"in","agentId":"agent-a"}`)
}

// sessionWriteCalls are the MAP calls that write for the session, each
// with its params.
var sessionWriteCalls = []struct{ method, params string }{
	{"map/agents/update", `{"agentId":"agent-a","state":"busy"}`},
	{"map/agents/suspend", `{"agentId":"agent-a"}`},
	{"map/scopes/join", `{"scopeId":"out","agentId":"agent-a"}`},
	{"map/scopes/leave", `{"scopeId":"in","agentId":"agent-a"}`},
	{"map/scopes/create", `{"scopeId":"new"}`},
	{"map/scopes/delete", `{"scopeId":"out"}`},
	{"map/agents/unregister", `{"agentId":"agent-a"}`},
}

// TestSessionWrites_EpochGate: a connection's writes quote its session
// and attach epoch only when every server enforces
// FSMLevelSessionWrites; below it (a server of an older version) they are
// proposed as before, which every FSM applies alike. The subscription
// methods hand the connection's epoch to the fanout, which gates its
// own writes (node/fanout TestHub_SessionEpochGate).
func TestSessionWrites_EpochGate(t *testing.T) {
	for _, level := range []int{0, registry.FSMLevelResumeEpoch, registry.FSMLevelSessionWrites, registry.FSMLevelSessionWrites + 1} {
		t.Run(fmt.Sprintf("level %d", level), func(t *testing.T) {
			e, rec := newWritesEnv(t, level)
			c1 := e.dial()
			res := connectAs(c1, TypeAgent, map[string]any{"participantId": "agent-a"})
			sid := res["sessionId"].(string)
			c2 := e.dial() // the session moves to c2: epoch 2
			connectAs(c2, TypeAgent, map[string]any{"participantId": "agent-a", "sessionId": sid, "resumeToken": res["resumeToken"]})
			sessionWritesSetup(c2)
			for _, call := range sessionWriteCalls {
				c2.must(call.method, call.params)
			}
			c2.must("map/subscribe", `{}`)
			c2.must("map/unsubscribe", `{"subscriptionId":"sub-1"}`)

			wantSID, wantEpoch := "", uint64(0)
			if level >= registry.FSMLevelSessionWrites {
				wantSID, wantEpoch = sid, 2
			}
			writes := rec.writes()
			if len(writes) != 3+len(sessionWriteCalls) { // the setup's scope creates and join, then the calls
				t.Fatalf("%d writes recorded, want %d", len(writes), 3+len(sessionWriteCalls))
			}
			for _, m := range writes {
				if gs, ge := originOf(m); gs != wantSID || ge != wantEpoch {
					t.Errorf("%T quotes session %q epoch %d, want %q %d", m, gs, ge, wantSID, wantEpoch)
				}
			}
			e.fanout.mu.Lock()
			epochs := slices.Clone(e.fanout.epochs)
			e.fanout.mu.Unlock()
			if want := []uint64{1, 2, 2, 2}; !slices.Equal(epochs, want) { // attach c1, attach c2, subscribe, unsubscribe
				t.Fatalf("fanout given epochs %v, want %v", epochs, want)
			}
		})
	}
}

// TestSessionWrites_HeldWriteRefused: a write from a connection whose
// session moves on while the write is on its way to the log (resumed on
// another node first) is refused by the FSM, with the participant told a
// retryable 4000 whose details.reason is session_moved, and changes
// nothing. Below FSMLevelSessionWrites it applies, as before.
func TestSessionWrites_HeldWriteRefused(t *testing.T) {
	for _, level := range []int{registry.FSMLevelResumeEpoch, registry.FSMLevelSessionWrites} {
		for _, call := range sessionWriteCalls {
			t.Run(fmt.Sprintf("level %d/%s", level, call.method), func(t *testing.T) {
				e, rec := newWritesEnv(t, level)
				c1 := e.dial()
				res := connectAs(c1, TypeAgent, map[string]any{"participantId": "agent-a"})
				sid := res["sessionId"].(string)
				sessionWritesSetup(c1)
				var once sync.Once
				rec.mu.Lock()
				rec.before = func(proto.Message) {
					once.Do(func() {
						s, _ := e.reg.Session(sid)
						_, _, err := e.store.Apply(context.Background(), concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, &concordv1.SessionOpenRequest{
							Meta:    &concordv1.CommandMeta{TimestampMs: 1, EventIds: []string{"ev-resume-n9"}, NodeId: "n9"},
							Session: &concordv1.SessionRecord{Id: sid, HomeNode: "n9", ResumeTokenHash: s.ResumeTokenHash}, Resume: true, ResumeFromEpoch: 1,
						})
						if err != nil {
							t.Errorf("resume on n9: %v", err)
						}
					})
				}
				rec.mu.Unlock()
				before := e.store.AppliedIndex()
				if level < registry.FSMLevelSessionWrites {
					c1.must(call.method, call.params)
					return
				}
				stateBefore := registryDump(e.reg)
				err := c1.fails(call.method, call.params, rpc.CodeExhausted)
				if !err.Data.Retryable || err.Data.Details["reason"] != ReasonSessionMoved {
					t.Fatalf("error data %+v, want retryable, reason %s", err.Data, ReasonSessionMoved)
				}
				if got := e.store.AppliedIndex(); got != before+2 {
					t.Fatalf("applied index %d -> %d, want the resume and the refused write committed", before, got)
				}
				// Only the resume on n9 changed the state.
				if s, _ := e.reg.Session(sid); s.HomeNode != "n9" {
					t.Fatalf("session %+v, want it on n9", s)
				}
				if after := registryDump(e.reg); after.agents != stateBefore.agents || after.scopes != stateBefore.scopes {
					t.Fatalf("the refused write changed agents or scopes:\n%+v\n%+v", stateBefore, after)
				}
			})
		}
	}
}

// registryState is what the session writes may change, but for homes
// (the resume on n9 re-homes agent-a).
type registryState struct{ agents, scopes string }

func registryDump(reg *registry.State) registryState {
	var out registryState
	for _, a := range reg.Agents() {
		out.agents += fmt.Sprintf("%s:%s:%s:%v;", a.ID, a.State, a.OwnerID, a.Scopes)
	}
	for _, sc := range reg.Scopes() {
		out.scopes += fmt.Sprintf("%s:%v;", sc.ID, sc.Members)
	}
	return out
}

// TestSessionWrites_FanoutRefusalShape: a subscribe or unsubscribe the
// registry refused because the session moved on reaches the participant
// as the same retryable 4000 (the fanout wraps the store's error), and so
// does a map/send reply to a run (node/runs wraps it likewise).
func TestSessionWrites_FanoutRefusalShape(t *testing.T) {
	refusal := &registry.Error{Code: registry.CodeExhausted, Field: "sessionId", Message: `session "s1" moved on since the writing connection attached at epoch 1`}
	for _, wrap := range []string{"propose subscription add", "propose subscription remove", "runs"} { // runs: a task reply (toRPC)
		err := translate(fmt.Errorf("%s: %w", wrap, &raftstore.CommandError{Index: 9, Err: refusal}))
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != rpc.CodeExhausted || !re.Data.Retryable || re.Data.Details["reason"] != ReasonSessionMoved {
			t.Fatalf("%s: translated to %#v, want a retryable 4000 with reason %s", wrap, err, ReasonSessionMoved)
		}
	}
}
