package federation

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// fakeServices is one in-process service, "concord.runs", that records
// what it is handed and answers with refuse.
type fakeServices struct {
	mu     sync.Mutex
	from   []string
	params []json.RawMessage
	refuse *CodeError
}

func (f *fakeServices) IsService(id string) bool { return id == "concord.runs" }

func (f *fakeServices) DeliverService(_ context.Context, _, from string, params json.RawMessage) *CodeError {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.from, f.params = append(f.from, from), append(f.params, params)
	return f.refuse
}

// emptyDirectory is a system without agents.
type emptyDirectory struct{}

func (emptyDirectory) Agents() []*concordv1.FedRemoteAgent                                { return nil }
func (emptyDirectory) Agent(string) (*concordv1.FedRemoteAgent, bool)                     { return nil, false }
func (emptyDirectory) ScopeMembers(string) ([]string, bool)                               { return nil, false }
func (emptyDirectory) Version() uint64                                                    { return 1 }
func (emptyDirectory) DeliverAgent(context.Context, string, json.RawMessage, func(error)) {}

// TestInStream_DeliverToService: an envelope for a service id reaches the
// service as map/send params from the remote sender, whatever the export
// policy (services are not in the directory), and its answer is the ack;
// an id that is no service is an unknown agent.
func TestInStream_DeliverToService(t *testing.T) {
	st := NewState()
	l := link("dc2")
	l.Export = none // exports nothing: a service is still reachable
	if err := apply(t, st, cmdPut, &concordv1.FedLinkPut{Link: l}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		to        string
		refuse    *CodeError
		code      int32
		delivered []string
	}{
		{"answered", "concord.runs", nil, 0, []string{"dc1:agent:concord.runs"}},
		{"refused", "concord.runs", &CodeError{Code: 90002, Message: "task settled"}, 90002, nil},
		{"not a service", "concord.other", nil, CodeAgentNotFound, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := &fakeServices{refuse: tc.refuse}
			m := &Manager{cfg: Config{SystemID: "dc1", NodeID: "n1", CallTimeout: time.Second, MaxEnvelopeBytes: 1 << 20},
				deps: Deps{State: st, Local: emptyDirectory{}, Deliver: emptyDirectory{}, Services: svc}, log: discardLogger()}
			in := &inStream{m: m, peer: "dc2", wake: make(chan struct{}, 1)}
			env := &concordv1.FedEnvelope{SourceSystem: "dc2", TargetSystem: "dc1", Path: []string{"dc2"}, HopCount: 1, MaxHops: 3,
				MessageId: "m1", From: "bob", ToAgent: tc.to, Seq: 7,
				Payload: []byte(`{"kind":"round","output":{}}`), Meta: []byte(`{"correlationId":"r/r1/dc2:agent:bob"}`)}
			deliverNow(context.Background(), in, env)
			m.wg.Wait()
			in.mu.Lock()
			acks := in.acks
			in.mu.Unlock()
			if len(acks) != 1 || acks[0].GetSeq() != 7 || acks[0].GetCode() != tc.code || len(acks[0].GetDelivered()) != len(tc.delivered) {
				t.Fatalf("acks %v, want one for seq 7 with code %d delivered %v", acks, tc.code, tc.delivered)
			}
			if tc.to != "concord.runs" {
				if len(svc.from) != 0 {
					t.Fatalf("service called for %s", tc.to)
				}
				return
			}
			want := `{"to":{"agent":"concord.runs"},"payload":{"kind":"round","output":{}},"meta":{"correlationId":"r/r1/dc2:agent:bob"}}`
			if len(svc.from) != 1 || svc.from[0] != "dc2:agent:bob" || string(svc.params[0]) != want {
				t.Fatalf("service got from %v params %s", svc.from, svc.params)
			}
		})
	}
}

func TestParseRemoteID(t *testing.T) {
	for _, tc := range []struct {
		in         string
		sys, id    string
		ok         bool
		roundTrips bool
	}{
		{"dc2:agent:bob", "dc2", "bob", true, true},
		{"dc2:agent:a:agent:b", "dc2", "a:agent:b", true, true},
		{"bob", "", "", false, false},
		{"dc2:agent:", "", "", false, false},
		{":agent:bob", "", "", false, false},
		{"bad id:agent:bob", "", "", false, false},
		{"dc2:scope:team", "", "", false, false},
	} {
		sys, id, ok := ParseRemoteID(tc.in)
		if sys != tc.sys || id != tc.id || ok != tc.ok {
			t.Fatalf("ParseRemoteID(%q) = %q %q %v, want %q %q %v", tc.in, sys, id, ok, tc.sys, tc.id, tc.ok)
		}
		if tc.roundTrips && RemoteID(sys, id) != tc.in {
			t.Fatalf("RemoteID(%q, %q) != %q", sys, id, tc.in)
		}
	}
}
