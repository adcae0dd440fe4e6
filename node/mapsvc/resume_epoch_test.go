package mapsvc

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// resumeRecorder is the store as a Proposer that records every resume (and
// open with agents to reclaim) proposed through it and may run a write of its own (another node's,
// committed first) before passing one on.
type resumeRecorder struct {
	store  *raftstore.Store
	mu     sync.Mutex
	seen   []*concordv1.SessionOpenRequest
	regs   []*concordv1.AgentRegisterRequest
	before func(n int) // called before the n-th resume (1-based) goes on
}

func (r *resumeRecorder) Apply(ctx context.Context, t concordv1.CommandType, m proto.Message) (any, uint64, error) {
	if o, ok := m.(*concordv1.SessionOpenRequest); ok && (o.GetResume() || len(o.GetReclaimAgents()) > 0) {
		r.mu.Lock()
		r.seen = append(r.seen, proto.Clone(o).(*concordv1.SessionOpenRequest))
		n, before := len(r.seen), r.before
		r.mu.Unlock()
		if before != nil {
			before(n)
		}
	}
	if o, ok := m.(*concordv1.AgentRegisterRequest); ok {
		r.mu.Lock()
		r.regs = append(r.regs, proto.Clone(o).(*concordv1.AgentRegisterRequest))
		r.mu.Unlock()
	}
	return r.store.Apply(ctx, t, m)
}

func (r *resumeRecorder) resumes() []*concordv1.SessionOpenRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*concordv1.SessionOpenRequest(nil), r.seen...)
}

func newResumeEnv(t *testing.T, level int) (*env, *resumeRecorder) {
	t.Helper()
	var rec *resumeRecorder
	e := newEnv(t, func(c *Config) {
		rec = &resumeRecorder{store: c.Store.(*raftstore.Store)}
		c.Store = rec
		c.FSMLevel = func(context.Context) int { return level }
	})
	return e, rec
}

// TestResume_EpochPreconditionGate: resume_from_epoch is proposed only when
// every server enforces it (Config.FSMLevel); with an older server in the
// system the resume is proposed as before, which every FSM applies alike.
func TestResume_EpochPreconditionGate(t *testing.T) {
	for _, tt := range []struct {
		name  string
		level int
		want  uint64
	}{
		{"a server of an older version (level 0)", 0, 0},
		{"every server enforces it", registry.FSMLevelResumeEpoch, 1},
		{"a newer level", registry.FSMLevelResumeEpoch + 1, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, rec := newResumeEnv(t, tt.level)
			c1 := e.dial()
			res := connectAs(c1, TypeClient, nil)
			c2 := e.dial()
			r := connectAs(c2, TypeClient, map[string]any{"sessionId": res["sessionId"], "resumeToken": res["resumeToken"]})
			if r["reconnected"] != true {
				t.Fatalf("resume %v", r)
			}
			got := rec.resumes()
			if len(got) != 1 || got[0].GetResumeFromEpoch() != tt.want {
				t.Fatalf("proposed %v, want one resume with resume_from_epoch %d", got, tt.want)
			}
		})
	}
}

// TestResume_SessionMovedMeanwhile: the session moves on between this
// node's read and the commit of its resume (another node's resume commits
// first). The live request is refused by the FSM, catches up and proposes
// again; it ends with the session. When it keeps moving, the participant
// gets a retryable 4000 (session_moved) and the session stays where the
// other resumes put it.
func TestResume_SessionMovedMeanwhile(t *testing.T) {
	steal := func(t *testing.T, e *env, sid string) {
		t.Helper()
		ep, _ := e.reg.SessionEpoch(sid)
		s, _ := e.reg.Session(sid)
		_, _, err := e.store.Apply(context.Background(), concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, &concordv1.SessionOpenRequest{
			Meta:    &concordv1.CommandMeta{TimestampMs: 1, EventIds: []string{"ev-steal-" + sid + string(rune('a'+ep))}, NodeId: "n9"},
			Session: &concordv1.SessionRecord{Id: sid, HomeNode: "n9", ResumeTokenHash: s.ResumeTokenHash}, Resume: true, ResumeFromEpoch: ep,
		})
		if err != nil {
			t.Errorf("resume on n9: %v", err)
		}
	}

	t.Run("once: retried and resumed", func(t *testing.T) {
		e, rec := newResumeEnv(t, registry.FSMLevelResumeEpoch)
		c1 := e.dial()
		res := connectAs(c1, TypeClient, nil)
		sid := res["sessionId"].(string)
		rec.before = func(n int) {
			if n == 1 {
				steal(t, e, sid)
			}
		}
		c2 := e.dial()
		r := connectAs(c2, TypeClient, map[string]any{"sessionId": sid, "resumeToken": res["resumeToken"]})
		if r["reconnected"] != true {
			t.Fatalf("resume %v", r)
		}
		got := rec.resumes()
		if len(got) != 2 || got[0].GetResumeFromEpoch() != 1 || got[1].GetResumeFromEpoch() != 2 {
			t.Fatalf("proposed %v, want resumes from epochs 1 (refused) then 2", got)
		}
		if s, _ := e.reg.Session(sid); !s.Connected || s.HomeNode != "n1" {
			t.Fatalf("session %+v, want attached to n1", s)
		}
		if ep, _ := e.reg.SessionEpoch(sid); ep != 3 {
			t.Fatalf("epoch %d, want 3", ep)
		}
	})

	t.Run("always: retryable 4000", func(t *testing.T) {
		e, rec := newResumeEnv(t, registry.FSMLevelResumeEpoch)
		c1 := e.dial()
		res := connectAs(c1, TypeClient, nil)
		sid := res["sessionId"].(string)
		rec.before = func(int) { steal(t, e, sid) }
		c2 := e.dial()
		err := c2.fails("map/connect", map[string]any{"protocolVersion": 1, "participantType": TypeClient, "sessionId": sid, "resumeToken": res["resumeToken"]}, rpc.CodeExhausted)
		if !err.Data.Retryable || err.Data.Details["reason"] != ReasonSessionMoved {
			t.Fatalf("error data %+v, want retryable, reason %s", err.Data, ReasonSessionMoved)
		}
		if n := len(rec.resumes()); n != 1+resumeRetries {
			t.Fatalf("%d resumes proposed, want %d", n, 1+resumeRetries)
		}
		if s, _ := e.reg.Session(sid); s.HomeNode != "n9" {
			t.Fatalf("session %+v, want it left on n9", s)
		}
	})
}

// TestReclaim_FromSessionsGate: a fresh connect's reclaimAgents quote the
// session each agent was in (reclaim_from_sessions) only when every server
// enforces it.
func TestReclaim_FromSessionsGate(t *testing.T) {
	for _, level := range []int{0, registry.FSMLevelResumeEpoch} {
		e, rec := newResumeEnv(t, level)
		c1 := e.dial()
		res := connectAs(c1, TypeAgent, map[string]any{"participantId": "agent-a", "disconnectPolicy": map[string]any{"agentBehavior": "orphan"}})
		sid := res["sessionId"].(string)
		c1.must("map/agents/register", `{"agentId":"agent-a","name":"A"}`)
		_ = c1.conn.Close("network down")
		<-c1.conn.Done()
		eventually(t, 5*time.Second, func() error {
			if a, _ := e.reg.Agent("agent-a"); a.OwnerID != "" {
				return fmt.Errorf("agent-a still owned by %q", a.OwnerID)
			}
			return nil
		})
		c2 := e.dial()
		r := connectAs(c2, TypeAgent, map[string]any{"participantId": "agent-b", "reclaimAgents": []string{"agent-a", "nobody"}})
		if rc, _ := r["reclaimedAgents"].([]any); len(rc) != 1 {
			t.Fatalf("level %d: reclaimedAgents %v", level, r["reclaimedAgents"])
		}
		got := rec.resumes()
		want := []string(nil)
		if level > 0 {
			want = []string{sid, ""}
		}
		if len(got) != 1 || !slices.Equal(got[0].GetReclaimFromSessions(), want) {
			t.Fatalf("level %d: proposed %v, want one open with reclaim_from_sessions %q", level, got, want)
		}
	}
}

// TestRegister_SessionEpochGate: a register quotes its connection's attach
// epoch only when every server enforces it.
func TestRegister_SessionEpochGate(t *testing.T) {
	for _, level := range []int{0, registry.FSMLevelResumeEpoch} {
		e, rec := newResumeEnv(t, level)
		c1 := e.dial()
		res := connectAs(c1, TypeAgent, map[string]any{"participantId": "agent-a"})
		c2 := e.dial() // the session moves to c2: epoch 2
		connectAs(c2, TypeAgent, map[string]any{"participantId": "agent-a", "resumeToken": res["resumeToken"]})
		c2.must("map/agents/register", `{"agentId":"agent-a","name":"A"}`)
		want := uint64(0)
		if level > 0 {
			want = 2
		}
		rec.mu.Lock()
		regs := rec.regs
		rec.mu.Unlock()
		if len(regs) != 1 || regs[0].GetSessionEpoch() != want {
			t.Fatalf("level %d: registers %v, want one with session_epoch %d", level, regs, want)
		}
	}
}
