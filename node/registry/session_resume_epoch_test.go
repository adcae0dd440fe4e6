package registry

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// resumeFrom is a resume of id onto node decided at epoch from (0 = no
// precondition, as an older proposer sends it).
func resumeFrom(id, node string, from uint64) *concordv1.SessionOpenRequest {
	m := resume(id, node, "hash-"+id)
	m.ResumeFromEpoch = from
	return m
}

type logStep struct {
	typ T
	msg proto.Message
}

// TestState_ResumeFromEpoch: a resume quoting the epoch its proposer read
// applies only while the session is still at that epoch; otherwise every
// replica refuses it alike and changes nothing. The log of each case is
// built once and applied to three fresh replicas.
func TestState_ResumeFromEpoch(t *testing.T) {
	opened := func() []logStep {
		return []logStep{
			{cSessionOpen, openSession("s1", "p1", BehaviorOrphan, 0)},
			{cAgentRegister, register("a1", inSession("s1", "p1"))},
		}
	}
	tests := []struct {
		name     string
		log      func() []logStep
		last     func() *concordv1.SessionOpenRequest
		wantCode int    // 0 = applied
		epoch    uint64 // after the last command
		home     string // after the last command
	}{
		{
			name: "detached session at the expected epoch",
			log: func() []logStep {
				return append(opened(), logStep{cSessionDetach, detach("s1", 1, 60_000)})
			},
			last:  func() *concordv1.SessionOpenRequest { return resumeFrom("s1", "n2", 2) },
			epoch: 3, home: "n2",
		},
		{
			name:  "still attached (its node died) at the expected epoch",
			log:   opened,
			last:  func() *concordv1.SessionOpenRequest { return resumeFrom("s1", "n2", 1) },
			epoch: 2, home: "n2",
		},
		{
			name: "resumed elsewhere meanwhile",
			log: func() []logStep {
				return append(opened(), logStep{cSessionOpen, resumeFrom("s1", "n3", 1)})
			},
			last:     func() *concordv1.SessionOpenRequest { return resumeFrom("s1", "n2", 1) },
			wantCode: CodeExhausted, epoch: 2, home: "n3",
		},
		{
			name: "detached meanwhile",
			log: func() []logStep {
				return append(opened(), logStep{cSessionDetach, detach("s1", 1, 60_000)})
			},
			last:     func() *concordv1.SessionOpenRequest { return resumeFrom("s1", "n2", 1) },
			wantCode: CodeExhausted, epoch: 2, home: "",
		},
		{
			name: "closed meanwhile (map/disconnect)",
			log: func() []logStep {
				return append(opened(), logStep{cSessionClose, &concordv1.SessionCloseRequest{Meta: meta(), SessionId: "s1", Epoch: 1, Reason: "bye", TtlMs: 60_000}})
			},
			last:     func() *concordv1.SessionOpenRequest { return resumeFrom("s1", "n2", 1) },
			wantCode: CodeExhausted, epoch: 2, home: "",
		},
		{
			name: "expired meanwhile",
			log: func() []logStep {
				return append(opened(),
					logStep{cSessionDetach, detach("s1", 1, 1000)},
					logStep{cSessionExpire, &concordv1.SessionExpireRequest{Meta: metaAt(tsNow + 10_000), SessionId: "s1", Epoch: 2, Kind: ExpireTTL}})
			},
			last:     func() *concordv1.SessionOpenRequest { return resumeFrom("s1", "n2", 2) },
			wantCode: CodeInvalidRequest, // unknown session: mapsvc's live request opens afresh
		},
		{
			name: "no precondition (older proposer): applies as before",
			log: func() []logStep {
				return append(opened(), logStep{cSessionOpen, resumeFrom("s1", "n3", 1)})
			},
			last:  func() *concordv1.SessionOpenRequest { return resumeFrom("s1", "n2", 0) },
			epoch: 3, home: "n2",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps, last := tt.log(), tt.last()
			var dumps []string
			for r := range 3 {
				h := newHarness(t, 100)
				for _, st := range steps {
					h.must(st.typ, st.msg)
				}
				if tt.wantCode != 0 {
					h.refuse(cSessionOpen, last, tt.wantCode) // also: state unchanged
				} else {
					res := h.must(cSessionOpen, last).(SessionResult)
					if !res.Resumed || res.Epoch != tt.epoch || res.Session.HomeNode != tt.home || !res.Session.Connected {
						t.Fatalf("replica %d: resume result %+v, want epoch %d on %s", r, res, tt.epoch, tt.home)
					}
					if a, _ := h.s.Agent("a1"); a.OwnerID != "p1" || a.HomeNode != tt.home {
						t.Fatalf("replica %d: agent a1 owner %q home %q after the resume", r, a.OwnerID, a.HomeNode)
					}
				}
				if tt.wantCode != CodeInvalidRequest {
					s, _ := h.s.Session("s1")
					if ep, _ := h.s.SessionEpoch("s1"); ep != tt.epoch || s.HomeNode != tt.home {
						t.Fatalf("replica %d: session at epoch %d on %q, want %d on %q", r, ep, s.HomeNode, tt.epoch, tt.home)
					}
				}
				dumps = append(dumps, dump(h.s))
			}
			for r := 1; r < len(dumps); r++ {
				if dumps[r] != dumps[0] {
					t.Fatalf("replica %d differs from replica 0:\n%s\n%s", r, dumps[r], dumps[0])
				}
			}
		})
	}
}

// TestState_ResumeFromEpochError: the refusal is the retryable sentinel,
// not the "unknown session" one mapsvc turns into a fresh session.
func TestState_ResumeFromEpochError(t *testing.T) {
	h := newHarness(t, 100)
	h.must(cSessionOpen, openSession("s1", "p1", BehaviorOrphan, 0))
	h.must(cSessionOpen, resumeFrom("s1", "n3", 1))
	_, err := h.apply(cSessionOpen, resumeFrom("s1", "n2", 1))
	var re *Error
	if !errors.Is(err, ErrSessionMoved) || !errors.As(err, &re) || re.Field != "sessionId" {
		t.Fatalf("stale resume: %v, want ErrSessionMoved", err)
	}
	if errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("stale resume matches ErrInvalidRequest: mapsvc would open a fresh session")
	}
}

// TestState_ReclaimFromSessions: a connect's reclaim quoting the session
// each agent was in when its proposer read it takes only the agents still
// there; one taken by another session of the participant since (a connect
// that succeeded elsewhere) stays, on every replica. Without the quote
// (older proposers) the reclaim is as before.
func TestState_ReclaimFromSessions(t *testing.T) {
	fresh := func(sid string, from ...string) *concordv1.SessionOpenRequest {
		m := openSession(sid, "p1", BehaviorOrphan, 0)
		m.ReclaimAgents, m.ReclaimFromSessions = []string{"a1"}, from
		return m
	}
	// p1's session s1 (its node died) owned a1; the leader detached it.
	base := func() []logStep {
		return []logStep{
			{cSessionOpen, openSession("s1", "p1", BehaviorOrphan, 0)},
			{cAgentRegister, register("a1", inSession("s1", "p1"))},
			{cSessionDetach, detach("s1", 1, 60_000)},
		}
	}
	tests := []struct {
		name      string
		log       func() []logStep
		last      func() *concordv1.SessionOpenRequest
		reclaimed bool
		session   string // a1's session after the last command
	}{
		{"orphan still in the session read", base, func() *concordv1.SessionOpenRequest { return fresh("s2", "s1") }, true, "s2"},
		{"taken by another connect meanwhile",
			func() []logStep { return append(base(), logStep{cSessionOpen, fresh("s3", "s1")}) },
			func() *concordv1.SessionOpenRequest { return fresh("s2", "s1") }, false, "s3"},
		{"no quote (older proposer): reclaimed as before",
			func() []logStep { return append(base(), logStep{cSessionOpen, fresh("s3", "s1")}) },
			func() *concordv1.SessionOpenRequest { return fresh("s2") }, true, "s2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps, last := tt.log(), tt.last()
			var dumps []string
			for r := range 3 {
				h := newHarness(t, 100)
				for _, st := range steps {
					h.must(st.typ, st.msg)
				}
				res := h.must(cSessionOpen, last).(SessionResult)
				got := len(res.Reclaimed) == 1 && res.Reclaimed[0].ID == "a1"
				if got != tt.reclaimed || (!tt.reclaimed && (len(res.NotReclaimed) != 1 || res.NotReclaimed[0] != "a1")) {
					t.Fatalf("replica %d: reclaimed %v, not reclaimed %v; want a1 reclaimed %v", r, res.Reclaimed, res.NotReclaimed, tt.reclaimed)
				}
				if a, _ := h.s.Agent("a1"); a.SessionID != tt.session || a.OwnerID != "p1" {
					t.Fatalf("replica %d: a1 in session %q owner %q, want %q", r, a.SessionID, a.OwnerID, tt.session)
				}
				dumps = append(dumps, dump(h.s))
			}
			for r := 1; r < len(dumps); r++ {
				if dumps[r] != dumps[0] {
					t.Fatalf("replica %d differs from replica 0", r)
				}
			}
		})
	}
	h := newHarness(t, 100)
	m := fresh("s9", "s1", "s2")
	h.refuse(cSessionOpen, m, CodeInvalidParams)
}

// TestState_RegisterSessionEpoch: a register quoting its connection's
// attach epoch applies only while the session is still at that epoch; a
// late one from a connection whose session was resumed elsewhere since
// would re-home the agent to a node that no longer holds the session.
func TestState_RegisterSessionEpoch(t *testing.T) {
	reg := func(home string, epoch uint64) *concordv1.AgentRegisterRequest {
		m := register("a1", inSession("s1", "p1"), func(r *concordv1.AgentRecord) { r.HomeNode = home })
		m.SessionEpoch = epoch
		return m
	}
	// s1 attached on n1 (epoch 1), then resumed on n3 (epoch 2), where the
	// client registered a1 again.
	moved := []logStep{
		{cSessionOpen, openSession("s1", "p1", BehaviorOrphan, 0)},
		{cAgentRegister, reg("n1", 1)},
		{cSessionOpen, resumeFrom("s1", "n3", 1)},
		{cAgentRegister, reg("n3", 2)},
	}
	tests := []struct {
		name string
		last *concordv1.AgentRegisterRequest
		code int
		home string
	}{
		{"from the connection holding the session", reg("n3", 2), 0, "n3"},
		{"late, from the connection on n1", reg("n1", 1), CodeExhausted, "n3"},
		{"no epoch (older proposer): re-homed as before", reg("n1", 0), 0, "n1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var dumps []string
			for range 3 {
				h := newHarness(t, 100)
				for _, st := range moved {
					h.must(st.typ, st.msg)
				}
				if tt.code != 0 {
					h.refuse(cAgentRegister, tt.last, tt.code)
				} else {
					h.must(cAgentRegister, tt.last)
				}
				if a, _ := h.s.Agent("a1"); a.HomeNode != tt.home {
					t.Fatalf("a1 homed on %q, want %q", a.HomeNode, tt.home)
				}
				dumps = append(dumps, dump(h.s))
			}
			if dumps[1] != dumps[0] || dumps[2] != dumps[0] {
				t.Fatal("replicas differ")
			}
		})
	}
}
