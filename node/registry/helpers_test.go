package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

type T = concordv1.CommandType

const (
	cAgentRegister   = concordv1.CommandType_COMMAND_TYPE_AGENT_REGISTER
	cAgentUnregister = concordv1.CommandType_COMMAND_TYPE_AGENT_UNREGISTER
	cAgentUpdate     = concordv1.CommandType_COMMAND_TYPE_AGENT_UPDATE
	cSessionOpen     = concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN
	cSessionClose    = concordv1.CommandType_COMMAND_TYPE_SESSION_CLOSE
	cSessionDetach   = concordv1.CommandType_COMMAND_TYPE_SESSION_DETACH
	cSessionExpire   = concordv1.CommandType_COMMAND_TYPE_SESSION_EXPIRE
	cSubAdd          = concordv1.CommandType_COMMAND_TYPE_SUBSCRIPTION_ADD
	cSubRemove       = concordv1.CommandType_COMMAND_TYPE_SUBSCRIPTION_REMOVE
	cSubCursor       = concordv1.CommandType_COMMAND_TYPE_SUBSCRIPTION_CURSOR
	cScopeCreate     = concordv1.CommandType_COMMAND_TYPE_SCOPE_CREATE
	cScopeDelete     = concordv1.CommandType_COMMAND_TYPE_SCOPE_DELETE
	cScopeJoin       = concordv1.CommandType_COMMAND_TYPE_SCOPE_JOIN
	cScopeLeave      = concordv1.CommandType_COMMAND_TYPE_SCOPE_LEAVE
)

// harness feeds hand-built commands to a State through its Handlers, the
// way the FSM does, with increasing Raft indexes.
type harness struct {
	t     *testing.T
	s     *State
	index uint64
}

func newHarness(t *testing.T, window int) *harness {
	t.Helper()
	cfg := DefaultConfig()
	cfg.EventWindow = window
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, s: s}
}

// decodeBody decodes a command body as raftstore's FSM does: with the
// handler's Decode when it has one.
func decodeBody(hd raftstore.Handler, body []byte) (proto.Message, error) {
	if hd.Decode != nil {
		return hd.Decode(body)
	}
	m := hd.New()
	if err := proto.Unmarshal(body, m); err != nil {
		return nil, err
	}
	return m, nil
}

// apply runs one command: the message goes through a proto round trip, as
// it would through the Raft log.
func (h *harness) apply(typ T, msg proto.Message) (any, error) {
	h.t.Helper()
	hd, ok := h.s.Handlers()[typ]
	if !ok {
		h.t.Fatalf("no handler for %v", typ)
	}
	b, err := proto.Marshal(msg)
	if err != nil {
		h.t.Fatal(err)
	}
	m, err := decodeBody(hd, b)
	if err != nil {
		h.t.Fatal(err)
	}
	h.index++
	res, err := hd.Apply(h.index, m)
	if l, ok := res.(raftstore.LazyResult); ok {
		res = l.Value() // as raftstore hands it to the proposer
	}
	return res, err
}

func (h *harness) must(typ T, msg proto.Message) any {
	h.t.Helper()
	res, err := h.apply(typ, msg)
	if err != nil {
		h.t.Fatalf("%v: %v", typ, err)
	}
	return res
}

// refuse applies a command that must fail with code and checks that the
// state did not change at all.
func (h *harness) refuse(typ T, msg proto.Message, code int) {
	h.t.Helper()
	before := dump(h.s)
	var ce *Error
	if cerr := h.s.Check(typ, msg); !errors.As(cerr, &ce) || ce.Code != code {
		h.t.Fatalf("%v: Check returned %v, want code %d", typ, cerr, code)
	}
	_, err := h.apply(typ, msg)
	var re *Error
	if !errors.As(err, &re) || re.Code != code {
		h.t.Fatalf("%v: got err %v, want registry error code %d", typ, err, code)
	}
	if after := dump(h.s); after != before {
		h.t.Fatalf("%v: refused command changed state\nbefore: %s\nafter:  %s", typ, before, after)
	}
}

var tsNow int64 = 1_700_000_000_000

func meta(ids ...string) *concordv1.CommandMeta {
	tsNow += 10
	return &concordv1.CommandMeta{TimestampMs: tsNow, EventIds: ids, NodeId: "n1", Source: "p1"}
}

func metaAt(ts int64, ids ...string) *concordv1.CommandMeta {
	return &concordv1.CommandMeta{TimestampMs: ts, EventIds: ids, NodeId: "n1"}
}

// dump renders everything a reader can observe, for equality checks.
func dump(s *State) string {
	var sessions []any
	for _, se := range s.Sessions() {
		ep, ok := s.SessionEpoch(se.ID)
		if one, found := s.Session(se.ID); !found || fmt.Sprintf("%+v", one) != fmt.Sprintf("%+v", se) {
			panic("Session and Sessions disagree")
		}
		sessions = append(sessions, struct {
			S     Session
			Raw   string
			Epoch uint64
			Ok    bool
		}{se, fmt.Sprintf("%+v", se), ep, ok})
	}
	var agents []string
	for _, a := range s.Agents() {
		one, ok := s.Agent(a.ID)
		agents = append(agents, fmt.Sprintf("%+v|%+v|%v|%d", a, one, ok, len(s.Children(a.ID))))
	}
	var scopes []string
	for _, sc := range s.Scopes() {
		one, ok := s.Scope(sc.ID)
		scopes = append(scopes, fmt.Sprintf("%+v|%+v|%v", sc, one, ok))
	}
	var events []string
	for _, ev := range s.EventsAfter(0, 0) {
		p, ok := s.PositionOf(ev.ID)
		events = append(events, fmt.Sprintf("%+v|%s|%d|%v", ev, ev.Data, p, ok))
	}
	// The session index must agree with a scan of all agents.
	scan := map[string][]string{}
	for _, a := range s.Agents() {
		if a.SessionID != "" {
			scan[a.SessionID] = append(scan[a.SessionID], a.ID)
		}
	}
	for _, se := range s.Sessions() {
		scan[se.ID] = append(scan[se.ID], []string{}...)
	}
	for sid, want := range scan {
		var got []string
		for _, a := range s.SessionAgents(sid) {
			got = append(got, a.ID)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			panic(fmt.Sprintf("SessionAgents(%s) = %v, scan says %v", sid, got, want))
		}
	}
	oldest, last := s.Window()
	drains, admitIdx := s.DrainAdmissions()
	out, _ := json.Marshal(map[string]any{
		"agents": agents, "scopes": scopes, "sessions": sessions,
		"events": events, "window": []uint64{oldest, last}, "expiries": s.Expiries(),
		"drains": fmt.Sprintf("%+v@%d", drains, admitIdx),
	})
	return string(out)
}

// snapshotBytes persists a snapshot into records.
func snapshotBytes(t *testing.T, s *State) [][]byte {
	t.Helper()
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var recs [][]byte
	if err := snap.Persist(func(b []byte) error {
		recs = append(recs, append([]byte(nil), b...))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return recs
}

func reader(recs [][]byte) func() ([]byte, error) {
	i := 0
	return func() ([]byte, error) {
		if i >= len(recs) {
			return nil, io.EOF
		}
		i++
		return recs[i-1], nil
	}
}

func types(evs []Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

// Command builders.

func register(id string, mut ...func(*concordv1.AgentRecord)) *concordv1.AgentRegisterRequest {
	r := &concordv1.AgentRecord{Id: id, Name: "agent " + id, OwnerId: "p1", SessionId: "", HomeNode: "n1"}
	for _, f := range mut {
		f(r)
	}
	return &concordv1.AgentRegisterRequest{Meta: meta(), Agent: r}
}

func inSession(sid, owner string) func(*concordv1.AgentRecord) {
	return func(r *concordv1.AgentRecord) { r.SessionId, r.OwnerId = sid, owner }
}

func openSession(id, participant, behavior string, graceMs int64) *concordv1.SessionOpenRequest {
	return &concordv1.SessionOpenRequest{Meta: meta(), Session: &concordv1.SessionRecord{
		Id: id, ParticipantId: participant, ParticipantType: "agent", HomeNode: "n1",
		DisconnectPolicy: &concordv1.DisconnectPolicyRecord{AgentBehavior: behavior, GracePeriodMs: graceMs},
		ResumeTokenHash:  []byte("hash-" + id),
	}}
}

func transition(id, verb string) *concordv1.AgentUpdateRequest {
	return &concordv1.AgentUpdateRequest{Meta: meta(), AgentId: id, Transition: verb}
}

func scope(id string, mut ...func(*concordv1.ScopeRecord)) *concordv1.ScopeCreateRequest {
	r := &concordv1.ScopeRecord{Id: id, Name: "scope " + id, Persistent: true}
	for _, f := range mut {
		f(r)
	}
	return &concordv1.ScopeCreateRequest{Meta: meta(), Scope: r}
}
