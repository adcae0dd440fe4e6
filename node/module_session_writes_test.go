package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/runs"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// The writes of registry.FSMLevelModuleSessionWrites: their state lives in
// the modules beside the registry (acl, federation, runs), whose apply
// reads the session from the registry replica applying the same log.

// moduleReplica is one replica of every state module, wired as the node
// wires them (newStateModules) and fed by hand like the FSM.
type moduleReplica struct {
	t        *testing.T
	mods     stateModules
	handlers map[concordv1.CommandType]raftstore.Handler
	index    uint64
}

func newModuleReplica(t *testing.T) *moduleReplica {
	t.Helper()
	reg, err := registry.New(registry.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	mods, err := newStateModules(reg, runs.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	r := &moduleReplica{t: t, mods: mods, handlers: map[concordv1.CommandType]raftstore.Handler{}}
	for _, m := range mods.list() {
		for typ, h := range m.Handlers() {
			r.handlers[typ] = h
		}
	}
	return r
}

// apply runs one command through its module's handler after a proto round
// trip, as it arrives from the log.
func (r *moduleReplica) apply(typ concordv1.CommandType, msg proto.Message) (any, error) {
	r.t.Helper()
	b, err := proto.Marshal(msg)
	if err != nil {
		r.t.Fatal(err)
	}
	h, ok := r.handlers[typ]
	if !ok {
		r.t.Fatalf("no handler for %v", typ)
	}
	body := h.New()
	if err := proto.Unmarshal(b, body); err != nil {
		r.t.Fatal(err)
	}
	r.index++
	return h.Apply(r.index, body)
}

func (r *moduleReplica) must(typ concordv1.CommandType, msg proto.Message) any {
	r.t.Helper()
	res, err := r.apply(typ, msg)
	if err != nil {
		r.t.Fatalf("%v: %v", typ, err)
	}
	return res
}

// dump renders what the three writes change and what they read: session
// s1, bob's ceiling, the gateway bindings, the run, and the event window.
func (r *moduleReplica) dump() string {
	var b strings.Builder
	ep, ok := r.mods.registry.SessionEpoch("s1")
	fmt.Fprintf(&b, "s1 %v epoch %d\n", ok, ep)
	fmt.Fprintf(&b, "bob denied %v limits %v\n", r.mods.acl.Denied("bob"), r.mods.acl.Limits("bob"))
	for _, g := range r.mods.fed.Gateways() {
		fmt.Fprintf(&b, "gateway %s -> %s\n", g.GetSystemId(), g.GetSessionId())
	}
	run, _ := r.mods.runs.Get(testRunID, runs.Include{Result: true, Events: true, State: true})
	j, _ := json.Marshal(run)
	fmt.Fprintf(&b, "run %s\n", j)
	for _, ev := range r.mods.registry.EventsAfter(0, 0) {
		fmt.Fprintf(&b, "event %d %s %s %s\n", ev.Position, ev.Type, ev.Source, ev.Data)
	}
	return b.String()
}

const testRunID = "01JRUN0000000000000000000A"

var msTest int64 = 1_750_000_000_000

func testMeta() *concordv1.CommandMeta {
	msTest += 10
	return &concordv1.CommandMeta{TimestampMs: msTest, NodeId: "n1", Source: "a1"}
}

func openS(id, participant string) *concordv1.SessionOpenRequest {
	return &concordv1.SessionOpenRequest{Meta: testMeta(), Session: &concordv1.SessionRecord{
		Id: id, ParticipantId: participant, ParticipantType: "agent", HomeNode: "n1",
		DisconnectPolicy: &concordv1.DisconnectPolicyRecord{AgentBehavior: registry.BehaviorOrphan},
		ResumeTokenHash:  []byte("hash-" + id)}}
}

func resumeS1(from uint64) *concordv1.SessionOpenRequest {
	return &concordv1.SessionOpenRequest{Meta: testMeta(), Resume: true, ResumeFromEpoch: from,
		Session: &concordv1.SessionRecord{Id: "s1", HomeNode: "n2", ResumeTokenHash: []byte("hash-s1")}}
}

func closeS1(epoch uint64) *concordv1.SessionCloseRequest {
	return &concordv1.SessionCloseRequest{Meta: testMeta(), SessionId: "s1", Epoch: epoch, Reason: "bye", TtlMs: 1000}
}

type moduleStep struct {
	typ concordv1.CommandType
	msg proto.Message
}

// moduleBase: session s1 (agent a1) at epoch 1 and s2 at epoch 1; the
// system lab bound to gateway session bound; a run of a1, a2 and a3 waiting
// for their first round.
func moduleBase(t *testing.T, bound string) []moduleStep {
	req, err := consensus.ParseRequest([]byte(`{"requestId":"req-1","task":"Ship it?",
	 "participants":[{"id":"a1"},{"id":"a2"},{"id":"a3"}],
	 "roundPolicy":{"minRounds":1,"maxRounds":2},
	 "waitingPolicy":{"perTaskTimeoutMs":5000,"perRoundTimeoutMs":60000}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return []moduleStep{
		{concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, openS("s1", "a1")},
		{concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, openS("s2", "gw2")},
		{concordv1.CommandType_COMMAND_TYPE_FED_GATEWAY_BIND, &concordv1.FedGatewayBind{
			Binding: &concordv1.FedGatewayBinding{SystemId: "lab", SessionId: bound, ParticipantId: "gw", BoundAtMs: 1}}},
		{concordv1.CommandType_COMMAND_TYPE_RUN_INPUT, &concordv1.RunInput{RunId: testRunID, TimeMs: msTest, NodeId: "n1",
			Source: "client", Input: &concordv1.RunInput_Start{Start: &concordv1.RunStart{RequestJson: body}}}},
	}
}

// taskOf is the outstanding task of participant pid in the test run.
func (r *moduleReplica) taskOf(pid string) string {
	r.t.Helper()
	run, _ := r.mods.runs.Get(testRunID, runs.Include{State: true})
	if run.State != nil {
		for _, tk := range run.State.OutstandingTasks {
			if tk.ParticipantID == pid {
				return tk.TaskID
			}
		}
	}
	r.t.Fatalf("no outstanding task of %s", pid)
	return ""
}

// moduleWrite is one write of FSMLevelModuleSessionWrites made by the
// connection of session s1 quoting attach epoch ep.
type moduleWrite struct {
	name  string
	typ   concordv1.CommandType
	build func(r *moduleReplica, ep uint64) proto.Message
}

func moduleWrites() []moduleWrite {
	return []moduleWrite{
		{"permissions update", concordv1.CommandType_COMMAND_TYPE_ACL_PERMISSIONS_UPDATE, func(_ *moduleReplica, ep uint64) proto.Message {
			return &concordv1.AclPermissionsUpdate{ParticipantId: "bob", Deny: []string{"actions.sendMessages"}, TimestampMs: msTest,
				UpdatedBy: "a1", OriginSessionId: "s1", OriginSessionEpoch: ep}
		}},
		{"gateway bind", concordv1.CommandType_COMMAND_TYPE_FED_GATEWAY_BIND, func(_ *moduleReplica, ep uint64) proto.Message {
			return &concordv1.FedGatewayBind{SessionEpoch: ep,
				Binding: &concordv1.FedGatewayBinding{SystemId: "lab", SessionId: "s1", ParticipantId: "a1", BoundAtMs: 2}}
		}},
		{"run reply (map/send)", concordv1.CommandType_COMMAND_TYPE_RUN_INPUT, func(r *moduleReplica, ep uint64) proto.Message {
			return &concordv1.RunInput{RunId: testRunID, TimeMs: msTest, NodeId: "n1", Source: "a1",
				OriginSessionId: "s1", OriginSessionEpoch: ep,
				Input: &concordv1.RunInput_TaskFailed{TaskFailed: &concordv1.RunTaskFailed{
					TaskId: r.taskOf("a1"), ParticipantId: "a1", Kind: string(consensus.FailError), Reason: "gave up"}}}
		}},
	}
}

// refusedMoved reports whether err is the refusal of a write whose session
// moved on, as the MAP layer answers it (4000, reason session_moved):
// the registry's ErrSessionMoved, or federation's for a gateway bind.
func refusedMoved(err error) bool {
	return errors.Is(err, registry.ErrSessionMoved) || errors.Is(err, federation.ErrSessionMoved)
}

// TestModules_SessionWriteEpoch: each write of FSMLevelModuleSessionWrites,
// quoting the attach epoch its connection holds, applies while the session
// is at that epoch and is refused with no state change once the session
// moved on (resumed elsewhere, detached, closed, gone); without an epoch
// it applies as before. Each case's log is applied to three fresh
// replicas, which must end identical.
func TestModules_SessionWriteEpoch(t *testing.T) {
	for _, w := range moduleWrites() {
		for _, mv := range sessionMoves() {
			t.Run(w.name+"/"+mv.name, func(t *testing.T) {
				steps := append(moduleBase(t, "s2"), mv.steps...)
				var (
					dumps []string
					write proto.Message // built once: every replica applies the same log
				)
				for i := range 3 {
					r := newModuleReplica(t)
					for _, st := range steps {
						r.must(st.typ, st.msg)
					}
					if write == nil {
						write = w.build(r, mv.quote)
					}
					before := r.dump()
					_, err := r.apply(w.typ, write)
					after := r.dump()
					switch {
					case mv.apply && err != nil:
						t.Fatalf("replica %d: refused: %v", i, err)
					case mv.apply && after == before:
						t.Fatalf("replica %d: the write changed nothing", i)
					case !mv.apply && !refusedMoved(err):
						t.Fatalf("replica %d: got %v, want the session-moved refusal", i, err)
					case !mv.apply && after != before:
						t.Fatalf("replica %d: the refused write changed state\nbefore: %s\nafter:  %s", i, before, after)
					}
					dumps = append(dumps, after)
				}
				if dumps[1] != dumps[0] || dumps[2] != dumps[0] {
					t.Fatalf("replicas differ:\n%s\n%s\n%s", dumps[0], dumps[1], dumps[2])
				}
			})
		}
	}
}

// sessionMoves are what happened to session s1 (at epoch 1 after
// moduleBase) before the write quoting quote commits.
func sessionMoves() []struct {
	name  string
	steps []moduleStep
	quote uint64
	apply bool
} {
	resumed := moduleStep{concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, resumeS1(1)}
	detached := moduleStep{concordv1.CommandType_COMMAND_TYPE_SESSION_DETACH,
		&concordv1.SessionDetachRequest{Meta: testMeta(), SessionId: "s1", Epoch: 1, Reason: "conn lost", TtlMs: 1000}}
	return []struct {
		name  string
		steps []moduleStep
		quote uint64
		apply bool
	}{
		{"at the epoch", nil, 1, true},
		{"resumed elsewhere, from the old connection", []moduleStep{resumed}, 1, false},
		{"resumed elsewhere, from the new connection", []moduleStep{resumed}, 2, true},
		{"detached (connection lost)", []moduleStep{detached}, 1, false},
		{"closed (map/disconnect)", []moduleStep{{concordv1.CommandType_COMMAND_TYPE_SESSION_CLOSE, closeS1(1)}}, 1, false},
		{"expired (gone)", []moduleStep{detached, {concordv1.CommandType_COMMAND_TYPE_SESSION_EXPIRE,
			&concordv1.SessionExpireRequest{Meta: &concordv1.CommandMeta{TimestampMs: msTest + 60_000, NodeId: "n1"},
				SessionId: "s1", Epoch: 2, Kind: registry.ExpireTTL}}}, 1, false},
		{"resumed elsewhere, no epoch (older proposer): applies as before", []moduleStep{resumed}, 0, true},
	}
}

// TestModules_GatewayUnbindEpoch: the leader's unbind of a gateway whose
// session ended quotes the epoch it saw it end at. It applies while the
// session is still ended there, or gone for good; once the session was
// attached again (a closed session resumed) the binding serves it and the
// unbind is refused with no state change.
func TestModules_GatewayUnbindEpoch(t *testing.T) {
	closed := moduleStep{concordv1.CommandType_COMMAND_TYPE_SESSION_CLOSE, closeS1(1)} // epoch 2
	tests := []struct {
		name  string
		steps []moduleStep
		quote uint64
		apply bool
	}{
		{"still closed", []moduleStep{closed}, 2, true},
		{"closed, then resumed", []moduleStep{closed, {concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, resumeS1(2)}}, 2, false},
		{"gone", []moduleStep{closed, {concordv1.CommandType_COMMAND_TYPE_SESSION_EXPIRE,
			&concordv1.SessionExpireRequest{Meta: &concordv1.CommandMeta{TimestampMs: msTest + 60_000, NodeId: "n1"},
				SessionId: "s1", Epoch: 2, Kind: registry.ExpireTTL}}}, 2, true},
		{"closed, then resumed, no epoch (older proposer): applies as before",
			[]moduleStep{closed, {concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, resumeS1(2)}}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps := append(moduleBase(t, "s1"), tt.steps...)
			var dumps []string
			for i := range 3 {
				r := newModuleReplica(t)
				for _, st := range steps {
					r.must(st.typ, st.msg)
				}
				before := r.dump()
				_, err := r.apply(concordv1.CommandType_COMMAND_TYPE_FED_GATEWAY_UNBIND,
					&concordv1.FedGatewayUnbind{SystemId: "lab", SessionId: "s1", SessionEpoch: tt.quote})
				_, bound := r.mods.fed.Gateway("lab")
				after := r.dump()
				switch {
				case tt.apply && (err != nil || bound):
					t.Fatalf("replica %d: err %v, still bound %v; want unbound", i, err, bound)
				case !tt.apply && (!errors.Is(err, federation.ErrSessionMoved) || after != before):
					t.Fatalf("replica %d: err %v, state changed %v; want refused unchanged", i, err, after != before)
				}
				dumps = append(dumps, after)
			}
			if dumps[1] != dumps[0] || dumps[2] != dumps[0] {
				t.Fatalf("replicas differ:\n%s\n%s\n%s", dumps[0], dumps[1], dumps[2])
			}
		})
	}
}
