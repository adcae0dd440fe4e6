package federation

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestDecodeGatewayRoute_Forms(t *testing.T) {
	for _, tc := range []struct {
		name, params string
		want         GatewayRoute
	}{
		{
			name: "sdk envelope with tracked path",
			params: `{"systemId":"dc1","envelope":{"payload":{"id":"m1","from":"alice","to":{"agent":"bob"},"payload":{"q":1},"meta":{"correlationId":"c"}},
				"federation":{"sourceSystem":"lab","targetSystem":"dc1","hopCount":0,"maxHops":4,"path":["lab"],"originTimestamp":1700000000000,"correlationId":"k"}}}`,
			want: GatewayRoute{Form: FormSDK, SystemID: "dc1", Source: "lab", Target: "dc1", Path: []string{"lab"}, Arrival: 1, MaxHops: 4,
				OriginTsMs: 1700000000000, CorrelationID: "k", MessageID: "m1", From: "alice", ToAgent: "bob",
				Payload: json.RawMessage(`{"q":1}`), Meta: json.RawMessage(`{"correlationId":"c"}`)},
		},
		{
			name: "sdk envelope without path, remote from and to forms, default max hops",
			params: `{"systemId":"dc2","envelope":{"payload":{"from":"lab:agent:alice","to":"dc2:agent:bob"},
				"federation":{"sourceSystem":"lab","targetSystem":"dc2","hopCount":2,"originTimestamp":5}}}`,
			want: GatewayRoute{Form: FormSDK, SystemID: "dc2", Source: "lab", Target: "dc2", Path: []string{"lab"}, Arrival: 3, MaxHops: DefaultMaxHops,
				OriginTsMs: 5, From: "alice", ToAgent: "bob"},
		},
		{
			name: "docs/07 envelope under message, scope recipient",
			params: `{"systemId":"dc1","message":{"message":{"from":"alice","to":{"system":"dc1","scope":"room"}},
				"federation":{"sourceSystem":"lab","targetSystem":"dc1","hopCount":0,"timestamp":7}}}`,
			want: GatewayRoute{Form: FormDocs07, SystemID: "dc1", Source: "lab", Target: "dc1", Path: []string{"lab"}, Arrival: 1, MaxHops: DefaultMaxHops,
				OriginTsMs: 7, From: "alice", ToScope: "room"},
		},
		{
			name: "sdk server gateway routing form",
			params: `{"systemId":"dc1","envelope":{"payload":{"from":"alice","to":"bob"},
				"routing":{"from":"lab","to":"dc1","hops":["lab","mid"],"maxHops":3},"timestamp":9}}`,
			want: GatewayRoute{Form: FormRouting, SystemID: "dc1", Source: "lab", Target: "dc1", Path: []string{"lab", "mid"}, Arrival: 2, MaxHops: 3,
				OriginTsMs: 9, From: "alice", ToAgent: "bob"},
		},
		{
			name:   "bare message (schema form)",
			params: `{"systemId":"dc1","message":{"id":"m","from":"alice","to":{"agent":"bob"},"timestamp":1}}`,
			want:   GatewayRoute{Form: FormMessage, SystemID: "dc1", Target: "dc1", MaxHops: DefaultMaxHops, MessageID: "m", From: "alice", ToAgent: "bob"},
		},
		{
			name:   "sdk server handler params (payload + maxHops 0)",
			params: `{"systemId":"dc1","payload":{"from":"alice","to":"bob"},"maxHops":0}`,
			want:   GatewayRoute{Form: FormMessage, SystemID: "dc1", Target: "dc1", MaxHops: 0, From: "alice", ToAgent: "bob"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeGatewayRoute(json.RawMessage(tc.params), 1<<20)
			if err != nil {
				t.Fatalf("decode: %d %s", err.Code, err.Message)
			}
			if !sameRoute(got, &tc.want) {
				t.Fatalf("decoded\n %+v\nwant\n %+v", *got, tc.want)
			}
		})
	}
}

func sameRoute(a, b *GatewayRoute) bool {
	compact := func(r json.RawMessage) string { return strings.Join(strings.Fields(string(r)), "") }
	return a.Form == b.Form && a.SystemID == b.SystemID && a.Source == b.Source && a.Target == b.Target &&
		slices.Equal(a.Path, b.Path) && a.Arrival == b.Arrival && a.MaxHops == b.MaxHops && a.OriginTsMs == b.OriginTsMs &&
		a.CorrelationID == b.CorrelationID && a.MessageID == b.MessageID && a.From == b.From && a.ToAgent == b.ToAgent &&
		a.ToScope == b.ToScope && compact(a.Payload) == compact(b.Payload) && compact(a.Meta) == compact(b.Meta)
}

func TestDecodeGatewayRoute_Refusals(t *testing.T) {
	env := func(fed, msg string) string {
		return `{"systemId":"dc1","envelope":{"payload":` + msg + `,"federation":` + fed + `}}`
	}
	okFed := `{"sourceSystem":"lab","targetSystem":"dc1","hopCount":0,"originTimestamp":1}`
	okMsg := `{"from":"alice","to":"bob"}`
	for _, tc := range []struct{ name, params, want string }{
		{"not an object", `[1,2]`, "params must be an object"},
		{"null", `null`, "params must be an object"},
		{"no system id", `{"envelope":{}}`, "systemId is required"},
		{"system id with a colon", `{"systemId":"a:b","envelope":{}}`, "not a valid system id"},
		{"system id not a string", `{"systemId":5,"envelope":{}}`, "systemId must be a string"},
		{"nothing to route", `{"systemId":"dc1"}`, "need an envelope"},
		{"envelope not an object", `{"systemId":"dc1","envelope":"x"}`, "envelope must be an object"},
		{"envelope without metadata", `{"systemId":"dc1","envelope":{"payload":{}}}`, "needs federation (or routing)"},
		{"federation not an object", env(`7`, okMsg), "envelope.federation must be an object"},
		{"no source", env(`{"targetSystem":"dc1","hopCount":0}`, okMsg), "sourceSystem is required"},
		{"no hop count", env(`{"sourceSystem":"lab","targetSystem":"dc1"}`, okMsg), "hopCount is required"},
		{"negative hop count", env(`{"sourceSystem":"lab","targetSystem":"dc1","hopCount":-1}`, okMsg), "hopCount must be in"},
		{"fractional hop count", env(`{"sourceSystem":"lab","targetSystem":"dc1","hopCount":0.5}`, okMsg), "hopCount must be an integer"},
		{"hop count a string", env(`{"sourceSystem":"lab","targetSystem":"dc1","hopCount":"0"}`, okMsg), "hopCount must be an integer"},
		{"huge max hops", env(`{"sourceSystem":"lab","targetSystem":"dc1","hopCount":0,"maxHops":1000}`, okMsg), "maxHops must be an integer in"},
		{"path not strings", env(`{"sourceSystem":"lab","targetSystem":"dc1","hopCount":0,"path":[1]}`, okMsg), "path must be an array"},
		{"path with a bad id", env(`{"sourceSystem":"lab","targetSystem":"dc1","hopCount":0,"path":["lab","a/b"]}`, okMsg), "invalid system id"},
		{"hop count below its path", env(`{"sourceSystem":"lab","targetSystem":"dc1","hopCount":0,"path":["lab","x","y"]}`, okMsg), "smaller than the path"},
		{"no payload", `{"systemId":"dc1","envelope":{"federation":` + okFed + `}}`, "envelope.payload is required"},
		{"payload not an object", env(okFed, `"hi"`), "envelope.payload must be an object"},
		{"no from", env(okFed, `{"to":"bob"}`), "message.from is required"},
		{"from of another system", env(okFed, `{"from":"dc9:agent:eve","to":"bob"}`), "names system dc9"},
		{"from with a colon", env(okFed, `{"from":"a:b","to":"bob"}`), "message.from must be"},
		{"from with a newline", env(okFed, `{"from":"a\nb","to":"bob"}`), "message.from must be"},
		{"no to", env(okFed, `{"from":"alice"}`), "message.to is required"},
		{"to of another system", env(okFed, `{"from":"alice","to":{"system":"dc2","agent":"bob"}}`), "names system dc2"},
		{"to a role", env(okFed, `{"from":"alice","to":{"role":"x"}}`), "agent or scope address"},
		{"to agent and scope", env(okFed, `{"from":"alice","to":{"agent":"a","scope":"s"}}`), "exactly one agent or scope"},
		{"to a number", env(okFed, `{"from":"alice","to":5}`), "agent or scope address"},
		{"meta not an object", env(okFed, `{"from":"alice","to":"bob","meta":[1]}`), "message.meta must be an object"},
		{"oversized", env(okFed, `{"from":"alice","to":"bob","payload":"`+strings.Repeat("x", 300)+`"}`), "more than the limit of 256"},
		{"routing without from", `{"systemId":"dc1","envelope":{"payload":{},"routing":{"to":"dc1"}}}`, "routing.from is required"},
		{"routing hops not a list", `{"systemId":"dc1","envelope":{"payload":{},"routing":{"from":"lab","to":"dc1","hops":"lab"}}}`, "hops must be an array"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeGatewayRoute(json.RawMessage(tc.params), 256)
			if err == nil {
				t.Fatalf("accepted %s", tc.params)
			}
			if err.Code != CodeInvalidParams || !strings.Contains(err.Message, tc.want) {
				t.Fatalf("error %d %q, want -32602 containing %q", err.Code, err.Message, tc.want)
			}
		})
	}
}
