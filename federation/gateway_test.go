package federation

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// gwFixture is a Manager of system dc1 (linked to dc2, no streams running)
// whose proposals apply straight to its state, with agents bob and carol
// and a scope "room", recording every delivery.
type gwFixture struct {
	m     *Manager
	st    *State
	store *applyStore

	mu        sync.Mutex
	toAgents  []string          // agent ids delivered to
	agentMsgs []json.RawMessage // what they got
	toSession []string          // session ids delivered to
	sessMsgs  []json.RawMessage
}

type applyStore struct {
	st *State
	mu sync.Mutex
	n  int // commands proposed
}

func (s *applyStore) Apply(_ context.Context, _ concordv1.CommandType, msg proto.Message) (any, uint64, error) {
	s.mu.Lock()
	s.n++
	n := s.n
	s.mu.Unlock()
	res, err := s.st.Apply(uint64(n), msg)
	return res, uint64(n), err
}

func (s *applyStore) proposed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

type gwDirectory struct{}

func (gwDirectory) Agents() []*concordv1.FedRemoteAgent { return nil }
func (gwDirectory) Agent(id string) (*concordv1.FedRemoteAgent, bool) {
	if id == "bob" || id == "carol" {
		return &concordv1.FedRemoteAgent{Id: id}, true
	}
	return nil, false
}
func (gwDirectory) ScopeMembers(id string) ([]string, bool) {
	if id == "room" {
		return []string{"bob", "carol"}, true
	}
	return nil, false
}
func (gwDirectory) Version() uint64 { return 1 }

func (f *gwFixture) DeliverAgent(_ context.Context, id string, msg json.RawMessage, done func(error)) {
	f.mu.Lock()
	f.toAgents = append(f.toAgents, id)
	f.agentMsgs = append(f.agentMsgs, msg)
	f.mu.Unlock()
	done(nil)
}

func (f *gwFixture) DeliverSession(_ context.Context, id string, msg json.RawMessage, done func(error)) {
	f.mu.Lock()
	f.toSession = append(f.toSession, id)
	f.sessMsgs = append(f.sessMsgs, msg)
	f.mu.Unlock()
	done(nil)
}

func newGWFixture(t *testing.T, barrier ...func(context.Context) error) *gwFixture {
	t.Helper()
	f := &gwFixture{st: NewState()}
	f.store = &applyStore{st: f.st}
	if _, err := f.st.Apply(0, &concordv1.FedLinkPut{Link: &concordv1.FedLink{PeerSystemId: "dc2", PeerAddrs: []string{"127.0.0.1:1"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.Apply(0, &concordv1.FedMapLinkPut{Link: mapLinkOf("ext", "ws://127.0.0.1:1/map")}); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.SystemID, cfg.NodeID, cfg.MaxEnvelopeBytes = "dc1", "n1", 1024
	m, err := New(cfg, Deps{State: f.st, Store: f.store, IsLeader: func() bool { return true }, Local: gwDirectory{},
		Deliver: f, Sessions: f, Servers: func() []string { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if len(barrier) > 0 {
		m.deps.Barrier = barrier[0]
	}
	f.m = m
	t.Cleanup(func() { m.Close(); m.wg.Wait() })
	return f
}

var labGateway = GatewayCaller{SessionID: "S1", ParticipantID: "gw-lab", Sources: []string{"lab"}, Targets: []string{"dc1", "dc2"}}

func (f *gwFixture) route(t *testing.T, c GatewayCaller, params string) (*GatewayRouteResult, *CodeError) {
	t.Helper()
	var res *GatewayRouteResult
	var cerr *CodeError
	called := 0
	f.m.GatewayRoute(context.Background(), c, json.RawMessage(params), func(r *GatewayRouteResult, e *CodeError) { res, cerr = r, e; called++ })
	if called != 1 {
		t.Fatalf("done called %d times", called)
	}
	return res, cerr
}

func sdkEnvelope(source, target string, hops int, path, maxHops, to string) string {
	fed := `"sourceSystem":"` + source + `","targetSystem":"` + target + `","hopCount":` + itoa(hops) + `,"originTimestamp":1`
	if path != "" {
		fed += `,"path":` + path
	}
	if maxHops != "" {
		fed += `,"maxHops":` + maxHops
	}
	return `{"systemId":"` + target + `","envelope":{"payload":{"id":"m1","from":"alice","to":` + to + `,"payload":{"q":1}},"federation":{` + fed + `}}}`
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestGatewayRoute_DeliversAndBinds(t *testing.T) {
	f := newGWFixture(t)
	res, cerr := f.route(t, labGateway, sdkEnvelope("lab", "dc1", 0, `["lab"]`, "", `{"agent":"bob"}`))
	if cerr != nil {
		t.Fatalf("route: %d %s", cerr.Code, cerr.Message)
	}
	if !res.Routed || res.MessageID != "m1" || !slices.Equal(res.Delivered, []string{"dc1:agent:bob"}) {
		t.Fatalf("result %+v", res)
	}
	var msg struct {
		From       string `json:"from"`
		Federation struct {
			SourceSystem string   `json:"sourceSystem"`
			Path         []string `json:"path"`
		} `json:"federation"`
	}
	if err := json.Unmarshal(f.agentMsgs[0], &msg); err != nil || msg.From != "lab:agent:alice" || msg.Federation.SourceSystem != "lab" {
		t.Fatalf("delivered %s (%v)", f.agentMsgs[0], err)
	}
	b, ok := f.st.Gateway("lab")
	if !ok || b.GetSessionId() != "S1" {
		t.Fatalf("binding %v %v", b, ok)
	}
	// A second route from the same session proposes nothing more.
	n := f.store.proposed()
	if _, cerr := f.route(t, labGateway, sdkEnvelope("lab", "dc1", 0, "", "", `{"scope":"room"}`)); cerr != nil {
		t.Fatalf("route to scope: %s", cerr.Message)
	}
	if f.store.proposed() != n || !slices.Equal(f.toAgents, []string{"bob", "bob", "carol"}) {
		t.Fatalf("proposals %d→%d, deliveries %v", n, f.store.proposed(), f.toAgents)
	}

	// A reply from bob to lab:agent:alice goes to the gateway's session,
	// with `to` naming lab so the gateway can relay it.
	var out Outcome
	f.m.Send(Message{TargetSystem: "lab", ToAgent: "alice", MessageID: "r1", From: "bob", Payload: []byte(`{"a":1}`),
		Meta: []byte(`{"correlationId":"m1"}`)}, func(o Outcome) { out = o })
	if out.Err != nil || !slices.Equal(out.Delivered, []string{"lab:agent:alice"}) || !slices.Equal(f.toSession, []string{"S1"}) {
		t.Fatalf("reply outcome %+v, sessions %v", out, f.toSession)
	}
	var reply struct {
		From string            `json:"from"`
		To   map[string]string `json:"to"`
		Meta map[string]string `json:"meta"`
	}
	if err := json.Unmarshal(f.sessMsgs[0], &reply); err != nil || reply.From != "dc1:agent:bob" || reply.To["system"] != "lab" ||
		reply.To["agent"] != "alice" || reply.Meta["correlationId"] != "m1" {
		t.Fatalf("reply delivered as %s (%v)", f.sessMsgs[0], err)
	}
}

// TestGatewayRoute_BadInput: every refusal has its code and message,
// proposes nothing (no binding) and delivers nothing.
func TestGatewayRoute_BadInput(t *testing.T) {
	for _, tc := range []struct {
		name   string
		caller GatewayCaller
		params string
		code   int
		want   string
	}{
		{"malformed json", labGateway, `{"systemId":`, CodeInvalidParams, "params must be an object"},
		{"wrong type for envelope", labGateway, `{"systemId":"dc1","envelope":[]}`, CodeInvalidParams, "envelope must be an object"},
		{"wrong type for hopCount", labGateway, `{"systemId":"dc1","envelope":{"payload":{"from":"a","to":"bob"},"federation":{"sourceSystem":"lab","targetSystem":"dc1","hopCount":true}}}`, CodeInvalidParams, "hopCount must be an integer"},
		{"oversized payload", labGateway, `{"systemId":"dc1","envelope":{"payload":{"from":"a","to":"bob","payload":"` + strings.Repeat("x", 2000) + `"},"federation":{"sourceSystem":"lab","targetSystem":"dc1","hopCount":0}}}`, CodeInvalidParams, "more than the limit of 1024"},
		{"forged source system", labGateway, sdkEnvelope("other", "dc1", 0, "", "", `"bob"`), CodeAuthFailed, "does not allow routing for system other"},
		{"source is this system", GatewayCaller{SessionID: "S1", Sources: []string{"*"}, Targets: []string{"*"}}, sdkEnvelope("dc1", "dc1", 0, "", "", `"bob"`), CodeAuthFailed, "cannot route for this system"},
		{"source is a linked Concord system", GatewayCaller{SessionID: "S1", Sources: []string{"*"}, Targets: []string{"*"}}, sdkEnvelope("dc2", "dc1", 0, "", "", `"bob"`), CodeAuthFailed, "linked Concord system"},
		{"no allowlist at all", GatewayCaller{SessionID: "S1"}, sdkEnvelope("lab", "dc1", 0, "", "", `"bob"`), CodeAuthFailed, "does not allow routing for system lab"},
		{"target not allowed", GatewayCaller{SessionID: "S1", Sources: []string{"lab"}, Targets: []string{"dc2"}}, sdkEnvelope("lab", "dc1", 0, "", "", `"bob"`), CodeNotExported, "does not allow routing to system dc1"},
		{"max hops reached", labGateway, sdkEnvelope("lab", "dc1", 3, "", "3", `"bob"`), CodeMaxHopsExceeded, "Max hops exceeded: 4 of 3"},
		{"max hops zero", labGateway, sdkEnvelope("lab", "dc1", 0, "", "0", `"bob"`), CodeMaxHopsExceeded, "Max hops exceeded"},
		{"onward hop over budget", labGateway, sdkEnvelope("lab", "dc2", 0, "", "1", `"bob"`), CodeMaxHopsExceeded, "Max hops exceeded"},
		{"loop through this system", labGateway, sdkEnvelope("lab", "dc1", 1, `["lab","dc1"]`, "", `"bob"`), CodeLoopDetected, "dc1 is already in the envelope's path"},
		{"loop to its own source", GatewayCaller{SessionID: "S1", Sources: []string{"lab"}, Targets: []string{"*"}}, sdkEnvelope("lab", "lab", 0, "", "", `"bob"`), CodeLoopDetected, "target lab is already"},
		{"target linked with a link of kind map", GatewayCaller{SessionID: "S1", Sources: []string{"lab"}, Targets: []string{"*"}}, sdkEnvelope("lab", "ext", 0, "", "", `"bob"`), CodeNotExported, "foreign MAP system"},
		{"unknown target system", GatewayCaller{SessionID: "S1", Sources: []string{"lab"}, Targets: []string{"*"}}, sdkEnvelope("lab", "nowhere", 0, "", "", `"bob"`), CodeSystemNotFound, "not found"},
		{"system id neither here nor target", labGateway, strings.Replace(sdkEnvelope("lab", "dc1", 0, "", "", `"bob"`), `"systemId":"dc1"`, `"systemId":"dc2"`, 1), CodeInvalidParams, "names neither"},
		{"unknown agent", labGateway, sdkEnvelope("lab", "dc1", 0, "", "", `"nobody"`), CodeAgentNotFound, "Agent not found: nobody"},
		{"unknown scope", labGateway, sdkEnvelope("lab", "dc1", 0, "", "", `{"scope":"nope"}`), CodeScopeNotFound, "Scope not found"},
		{"bare message with a wildcard source", GatewayCaller{SessionID: "S1", Sources: []string{"*"}, Targets: []string{"*"}}, `{"systemId":"dc1","message":{"from":"a","to":"bob"}}`, CodeInvalidParams, "names no source system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newGWFixture(t)
			before := f.st.Snapshot()
			res, cerr := f.route(t, tc.caller, tc.params)
			if cerr == nil {
				t.Fatalf("accepted: %+v", res)
			}
			if cerr.Code != tc.code || !strings.Contains(cerr.Message, tc.want) {
				t.Fatalf("error %d %q, want %d containing %q", cerr.Code, cerr.Message, tc.code, tc.want)
			}
			if f.store.proposed() != 0 || len(f.toAgents) != 0 || len(f.toSession) != 0 {
				t.Fatalf("refusal changed something: %d proposals, delivered to %v %v", f.store.proposed(), f.toAgents, f.toSession)
			}
			after := f.st.Snapshot()
			if len(before) != len(after) {
				t.Fatalf("state changed: %v → %v", before, after)
			}
		})
	}
}

func TestGatewayRoute_BareMessageSpeaksForTheOneSource(t *testing.T) {
	f := newGWFixture(t)
	res, cerr := f.route(t, labGateway, `{"systemId":"dc1","message":{"from":"alice","to":{"agent":"carol"}}}`)
	if cerr != nil || !slices.Equal(res.Delivered, []string{"dc1:agent:carol"}) || res.MessageID == "" {
		t.Fatalf("route: %+v %v", res, cerr)
	}
	if !strings.Contains(string(f.agentMsgs[0]), `"from":"lab:agent:alice"`) {
		t.Fatalf("delivered %s", f.agentMsgs[0])
	}
}

func TestGatewayConnect(t *testing.T) {
	f := newGWFixture(t)
	for _, tc := range []struct {
		name   string
		caller GatewayCaller
		params string
		code   int
		status string
	}{
		{"this system", labGateway, `{"systemId":"dc1","endpoint":"ws://x/map"}`, 0, "connected"},
		{"linked system without a stream yet", labGateway, `{"systemId":"dc2","endpoint":"ws://x/map","auth":{"method":"none"}}`, 0, "disconnected"},
		{"unknown system", labGateway, `{"systemId":"dc9","endpoint":"ws://x/map"}`, CodeSystemNotFound, ""},
		{"system linked with a link of kind map", GatewayCaller{SessionID: "S1", Targets: []string{"*"}}, `{"systemId":"ext","endpoint":"e"}`, CodeNotExported, ""},
		{"not allowed", GatewayCaller{SessionID: "S1", Sources: []string{"lab"}, Targets: []string{"dc1"}}, `{"systemId":"dc2","endpoint":"e"}`, CodeNotExported, ""},
		{"missing system id", labGateway, `{"endpoint":"e"}`, CodeInvalidParams, ""},
		{"endpoint not a string", labGateway, `{"systemId":"dc1","endpoint":5}`, CodeInvalidParams, ""},
		{"params not an object", labGateway, `"dc1"`, CodeInvalidParams, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, cerr := f.m.GatewayConnect(tc.caller, json.RawMessage(tc.params))
			switch {
			case tc.code != 0 && (cerr == nil || cerr.Code != tc.code):
				t.Fatalf("got %+v, %v; want error %d", res, cerr, tc.code)
			case tc.code == 0 && (cerr != nil || !res.Connected || res.Status != tc.status || res.SessionID != "S1"):
				t.Fatalf("got %+v, %v; want connected, %s", res, cerr, tc.status)
			}
		})
	}
	if f.store.proposed() != 0 {
		t.Fatal("connect proposed a command")
	}
}

// TestGatewaySend_WaitsForABindingNotAppliedYet: a reply to a system
// with no link and no binding here waits for one barrier round (the
// binding may be committed but not applied on this node yet); a send
// queued while a round is in flight waits for the next one at most.
func TestGatewaySend_WaitsForABindingNotAppliedYet(t *testing.T) {
	var f *gwFixture
	var rounds sync.WaitGroup
	rounds.Add(1)
	barriers := 0
	f = newGWFixture(t, func(context.Context) error {
		rounds.Wait() // hold the first round until both sends are queued
		barriers++
		_, err := f.st.Apply(9, bind("lab", "S7"))
		return err
	})
	results := make(chan Outcome, 2)
	for _, id := range []string{"r1", "r2"} {
		f.m.Send(Message{TargetSystem: "lab", ToAgent: "alice", MessageID: id, From: "bob"}, func(o Outcome) { results <- o })
	}
	rounds.Done()
	for range 2 {
		if o := <-results; o.Err != nil || !slices.Equal(o.Delivered, []string{"lab:agent:alice"}) {
			t.Fatalf("outcome %+v", o)
		}
	}
	f.m.Close()
	f.m.wg.Wait()
	if barriers < 1 || barriers > 2 || !slices.Equal(f.toSession, []string{"S7", "S7"}) {
		t.Fatalf("%d barrier rounds, delivered to %v", barriers, f.toSession)
	}
	// Still nothing bound: the send fails as before, after the barrier.
	f2 := newGWFixture(t, func(context.Context) error { return nil })
	out := make(chan Outcome, 1)
	f2.m.Send(Message{TargetSystem: "nowhere", ToAgent: "x", MessageID: "r3", From: "bob"}, func(o Outcome) { out <- o })
	if o := <-out; o.Err == nil || o.Err.Code != CodeSystemNotFound {
		t.Fatalf("outcome %+v", o)
	}
}
