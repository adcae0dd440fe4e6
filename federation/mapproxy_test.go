package federation

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// fakeLocal is a LocalDirectory of fixed agents.
type fakeLocal map[string]*concordv1.FedRemoteAgent

func (f fakeLocal) Agents() []*concordv1.FedRemoteAgent {
	var out []*concordv1.FedRemoteAgent
	for _, a := range f {
		out = append(out, a)
	}
	return out
}
func (f fakeLocal) Agent(id string) (*concordv1.FedRemoteAgent, bool) { a, ok := f[id]; return a, ok }
func (fakeLocal) ScopeMembers(string) ([]string, bool)                { return nil, false }
func (fakeLocal) Version() uint64                                     { return 1 }

// fakeDeliver records deliveries.
type fakeDeliver struct {
	mu  sync.Mutex
	got []json.RawMessage
}

func (d *fakeDeliver) DeliverAgent(_ context.Context, _ string, msg json.RawMessage, done func(error)) {
	d.mu.Lock()
	d.got = append(d.got, msg)
	d.mu.Unlock()
	done(nil)
}

type nopStore struct{}

func (nopStore) Apply(context.Context, concordv1.CommandType, proto.Message) (any, uint64, error) {
	return nil, 0, nil
}

// testProxy builds a proxy for local agent alice (exported by exp) on a
// link to system "sdk", without a network.
func testProxy(t testing.TB, exp *concordv1.FedPolicy) (*proxy, *fakeDeliver) {
	cfg := DefaultConfig()
	cfg.SystemID, cfg.NodeID, cfg.Plaintext = "dc1", "n1", true
	d := &fakeDeliver{}
	m, err := New(cfg, Deps{State: NewState(), Store: nopStore{}, IsLeader: func() bool { return true },
		Local: fakeLocal{"alice": {Id: "alice"}}, Deliver: d, Servers: func() []string { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	link := mapLinkOf("sdk", "ws://h/map")
	link.Export = exp
	l := newMapLink(m, link)
	h := &holding{l: l, ctx: context.Background(), link: link, proxies: map[string]*proxy{}}
	p := &proxy{h: h, localID: "alice", agent: &concordv1.FedRemoteAgent{Id: "alice"}, wake: make(chan struct{}, 1),
		pending: map[string][]pairing{}}
	return p, d
}

func TestProxy_Inbound(t *testing.T) {
	huge := `{"message":{"id":"m","from":"bob","payload":"` + strings.Repeat("x", 2<<20) + `"}}`
	tests := []struct {
		name      string
		params    string
		export    *concordv1.FedPolicy
		wantOK    bool
		wantFrom  string
		wantInErr uint64
	}{
		{"wrapped message", `{"message":{"id":"m1","from":"bob","payload":{"n":1},"meta":{"priority":"high"}}}`, all, true, "sdk:agent:bob", 0},
		{"bare message", `{"id":"m2","from":"bob","payload":1}`, all, true, "sdk:agent:bob", 0},
		{"no sender", `{"message":{"id":"m","from":"","payload":1}}`, all, false, "", 1},
		{"sender not a string", `{"message":{"id":"m","from":{"x":1}}}`, all, false, "", 1},
		{"sender with a colon", `{"message":{"id":"m","from":"a:b"}}`, all, false, "", 1},
		{"meta not an object", `{"message":{"id":"m","from":"bob","meta":[1]}}`, all, false, "", 1},
		{"params not an object", `"x"`, all, false, "", 1},
		{"too large", huge, all, false, "", 1},
		{"not exported", `{"message":{"id":"m","from":"bob"}}`, none, false, "", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, d := testProxy(t, tc.export)
			p.onNotify("map/message", json.RawMessage(tc.params))
			if got := p.h.l.inErrors; got != tc.wantInErr {
				t.Fatalf("inbound errors %d, want %d", got, tc.wantInErr)
			}
			if (len(d.got) == 1) != tc.wantOK {
				t.Fatalf("delivered %d messages, want ok=%v", len(d.got), tc.wantOK)
			}
			if tc.wantOK {
				var m struct {
					From string `json:"from"`
					To   struct {
						Agent string `json:"agent"`
					} `json:"to"`
				}
				if err := json.Unmarshal(d.got[0], &m); err != nil || m.From != tc.wantFrom || m.To.Agent != "alice" {
					t.Fatalf("delivered %s", d.got[0])
				}
			}
		})
	}
}

func FuzzProxyInbound(f *testing.F) {
	for _, s := range []string{`{"message":{"id":"m1","from":"bob","payload":{"n":1}}}`, `{}`, `null`, `{"from":"b","meta":null}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, params string) {
		p, d := testProxy(t, all)
		p.onNotify("map/message", json.RawMessage(params))
		for _, msg := range d.got {
			var m struct {
				From string `json:"from"`
			}
			if !json.Valid(msg) || json.Unmarshal(msg, &m) != nil || !strings.HasPrefix(m.From, "sdk:agent:") {
				t.Fatalf("delivered a malformed message %q from params %q", msg, params)
			}
		}
	})
}
