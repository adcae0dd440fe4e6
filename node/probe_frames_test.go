package node_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// frameProbe is one malformed or unusual frame and what the node must
// answer (map-protocol.md §2.1, §6; node/rpc/doc.go "Decoding").
type frameProbe struct {
	name  string
	frame string
	// want: one entry per expected reply frame. A batch reply is given as
	// batch with one entry per element; nothing expected = both empty.
	want  []wantErr
	batch []wantErr
	// preConnect sends the probe before map/connect.
	preConnect bool
}

func frameProbes() []frameProbe {
	req := func(id, method, params string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":%q,"params":%s}`, id, method, params)
	}
	proto := func(code int, id string) wantErr { return wantErr{code: code, id: id, category: "protocol"} }
	many := func(n int, w wantErr) []wantErr {
		out := make([]wantErr, n)
		for i := range out {
			out[i] = w
		}
		return out
	}
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	return []frameProbe{
		// Not JSON at all, or not an object.
		{name: "invalid JSON", frame: `{"jsonrpc":"2.0","id":1,`, want: []wantErr{proto(-32700, "null")}},
		{name: "garbage bytes", frame: "\x00\x01\x02garbage", want: []wantErr{proto(-32700, "null")}},
		{name: "trailing data", frame: req("1", "map/agents/list", "{}") + "{}", want: []wantErr{proto(-32700, "null")}},
		{name: "invalid UTF-8", frame: `{"jsonrpc":"2.0","id":1,"method":"map/agents/list","params":{"x":"` + "\xff\xfe" + `"}}`, want: []wantErr{proto(-32700, "null")}},
		{name: "raw NUL inside a string", frame: `{"jsonrpc":"2.0","id":1,"method":"map/agents/list","params":{"x":"a` + "\x00" + `b"}}`, want: []wantErr{proto(-32700, "null")}},
		{name: "number", frame: `42`, want: []wantErr{proto(-32600, "null")}},
		{name: "string", frame: `"map/connect"`, want: []wantErr{proto(-32600, "null")}},
		{name: "null", frame: `null`, want: []wantErr{proto(-32600, "null")}},
		{name: "empty object", frame: `{}`, want: []wantErr{proto(-32600, "null")}},
		{name: "deeply nested params", frame: req("1", "map/agents/list", `{"x":`+deep+`}`), want: []wantErr{proto(-32700, "null")}},

		// Batches.
		{name: "empty batch", frame: `[]`, want: []wantErr{proto(-32600, "null")}},
		{name: "batch of numbers", frame: `[1,2,3]`, batch: many(3, proto(-32600, "null"))},
		{name: "nested batch", frame: `[[]]`, batch: many(1, proto(-32600, "null"))},
		{name: "broken batch", frame: `[{"jsonrpc":"2.0","id":1,"method":"x"},`, want: []wantErr{proto(-32700, "null")}},
		{name: "batch over MaxBatchLen", frame: "[" + strings.TrimSuffix(strings.Repeat(`{"jsonrpc":"2.0","method":"x-n"},`, 17), ",") + "]", want: []wantErr{proto(-32600, "null")}},
		{name: "batch of notifications only", frame: `[{"jsonrpc":"2.0","method":"x-n"},{"jsonrpc":"2.0","method":"map/subscribe.ack","params":{}}]`},
		{name: "mixed batch", frame: `[` + req("1", "map/agents/list", "{}") + `,{"id":2},` + `{"jsonrpc":"2.0","method":"x-n"},` + req("3", "x-nope", "{}") + `]`,
			batch: []wantErr{{code: 0, id: "1"}, proto(-32600, "2"), proto(-32601, "3")}},

		// The id, every JSON type.
		{name: "id null", frame: req("null", "map/agents/list", "{}"), want: []wantErr{proto(-32600, "null")}},
		{name: "id float", frame: req("1.5", "map/agents/list", "{}"), want: []wantErr{proto(-32600, "null")}},
		{name: "id exponent", frame: req("1e3", "map/agents/list", "{}"), want: []wantErr{proto(-32600, "null")}},
		{name: "id object", frame: req(`{"a":1}`, "map/agents/list", "{}"), want: []wantErr{proto(-32600, "null")}},
		{name: "id array", frame: req(`[1]`, "map/agents/list", "{}"), want: []wantErr{proto(-32600, "null")}},
		{name: "id bool", frame: req(`true`, "map/agents/list", "{}"), want: []wantErr{proto(-32600, "null")}},
		{name: "id huge integer echoed verbatim", frame: req("123456789012345678901234567890", "x-nope", "{}"), want: []wantErr{proto(-32601, "123456789012345678901234567890")}},
		{name: "id negative", frame: req("-7", "x-nope", "{}"), want: []wantErr{proto(-32601, "-7")}},
		{name: "id too long, never echoed", frame: req(`"`+strings.Repeat("i", 300)+`"`, "map/agents/list", "{}"), want: []wantErr{proto(-32600, "null")}},
		{name: "id string with unicode", frame: req(`"\u00e9\ud83d\ude00"`, "x-nope", "{}"), want: []wantErr{proto(-32601, `"é😀"`)}},

		// The envelope.
		{name: "missing jsonrpc", frame: `{"id":1,"method":"map/agents/list"}`, want: []wantErr{proto(-32600, "1")}},
		{name: "jsonrpc 1.0", frame: `{"jsonrpc":"1.0","id":1,"method":"map/agents/list"}`, want: []wantErr{proto(-32600, "1")}},
		{name: "jsonrpc number", frame: `{"jsonrpc":2.0,"id":1,"method":"map/agents/list"}`, want: []wantErr{proto(-32600, "1")}},
		{name: "duplicate id", frame: `{"jsonrpc":"2.0","id":1,"id":2,"method":"map/agents/list"}`, want: []wantErr{proto(-32600, "")}},
		{name: "method number", frame: `{"jsonrpc":"2.0","id":1,"method":7}`, want: []wantErr{proto(-32600, "1")}},
		{name: "method empty", frame: `{"jsonrpc":"2.0","id":1,"method":""}`, want: []wantErr{proto(-32600, "1")}},
		{name: "method too long", frame: req("1", strings.Repeat("m", 200), "{}"), want: []wantErr{proto(-32600, "1")}},
		{name: "params array", frame: req("1", "map/agents/list", "[1]"), want: []wantErr{proto(-32602, "1")}},
		{name: "params string", frame: req("1", "map/agents/list", `"x"`), want: []wantErr{proto(-32600, "1")}},
		{name: "request with result", frame: `{"jsonrpc":"2.0","id":1,"method":"map/agents/list","result":{}}`, want: []wantErr{proto(-32600, "1")}},
		{name: "unknown method", frame: req("1", "map/nope", "{}"), want: []wantErr{proto(-32601, "1")}},
		{name: "unknown method as notification", frame: `{"jsonrpc":"2.0","method":"map/nope","params":{}}`},
		{name: "inbound map/message refused", frame: req("1", "map/message", `{"message":{}}`), want: []wantErr{proto(-32601, "1")}},
		{name: "inbound map/event refused", frame: req("1", "map/event", `{}`), want: []wantErr{proto(-32601, "1")}},

		// Responses to nothing we asked.
		{name: "result to nothing", frame: `{"jsonrpc":"2.0","id":99,"result":{}}`},
		{name: "error to nothing", frame: `{"jsonrpc":"2.0","id":"x","error":{"code":1,"message":"m"}}`},
		{name: "response with result and error", frame: `{"jsonrpc":"2.0","id":5,"result":1,"error":{"code":1,"message":"m"}}`, want: []wantErr{proto(-32600, "5")}},
		{name: "response without id", frame: `{"jsonrpc":"2.0","result":{}}`, want: []wantErr{proto(-32600, "null")}},

		// Before map/connect.
		{name: "query before connect", preConnect: true, frame: req("1", "map/agents/list", "{}"), want: []wantErr{{code: 1000, id: "1", category: "auth"}}},
		{name: "register before connect", preConnect: true, frame: req("1", "map/agents/register", `{"agentId":"sneaky"}`), want: []wantErr{{code: 1000, id: "1", category: "auth"}}},
		{name: "send before connect", preConnect: true, frame: req("1", "map/send", `{"to":"x","payload":1}`), want: []wantErr{{code: 1000, id: "1", category: "auth"}}},
		{name: "connect as notification creates no session", preConnect: true, frame: `{"jsonrpc":"2.0","method":"map/connect","params":{"protocolVersion":1,"participantType":"agent"}}`},
		{name: "register as notification before connect", preConnect: true, frame: `{"jsonrpc":"2.0","method":"map/agents/register","params":{"agentId":"sneaky"}}`},
		{name: "connect with wrong protocolVersion", preConnect: true, frame: req("1", "map/connect", `{"protocolVersion":2,"participantType":"agent"}`), want: []wantErr{proto(-32602, "1")}},
		{name: "connect with protocolVersion string", preConnect: true, frame: req("1", "map/connect", `{"protocolVersion":"1","participantType":"agent"}`), want: []wantErr{proto(-32602, "1")}},
		{name: "connect with unknown participantType", preConnect: true, frame: req("1", "map/connect", `{"protocolVersion":1,"participantType":"root"}`), want: []wantErr{proto(-32602, "1")}},
		{name: "connect as system without credential", preConnect: true, frame: req("1", "map/connect", `{"protocolVersion":1,"participantType":"system"}`), want: []wantErr{{code: 1003, id: "1", category: "auth"}}},
		{name: "register as notification after connect", frame: `{"jsonrpc":"2.0","method":"map/agents/register","params":{"agentId":"silent"}}`},
		{name: "scope create as notification after connect", frame: `{"jsonrpc":"2.0","method":"map/scopes/create","params":{"scopeId":"silent"}}`},
		{name: "disconnect as notification", frame: `{"jsonrpc":"2.0","method":"map/disconnect","params":{}}`},
		{name: "connect with unknown auth method", preConnect: true, frame: req("1", "map/connect", `{"protocolVersion":1,"participantType":"agent","auth":{"method":"magic","token":"x"}}`), want: []wantErr{{code: 1005, id: "1", category: "auth"}}},
		{name: "connect with bearer the node does not offer", preConnect: true, frame: req("1", "map/connect", `{"protocolVersion":1,"participantType":"agent","auth":{"method":"bearer","token":"not.a.jwt"}}`), want: []wantErr{{code: 1005, id: "1", category: "auth"}}},
		{name: "connect with a bogus api key", preConnect: true, frame: req("1", "map/connect", `{"protocolVersion":1,"participantType":"agent","auth":{"method":"api-key","token":"map_sk_bogus"}}`), want: []wantErr{{code: 1001, id: "1", category: "auth"}}},
		{name: "connect with an api key of the wrong type", preConnect: true, frame: req("1", "map/connect", `{"protocolVersion":1,"participantType":"agent","auth":{"method":"api-key","token":42}}`), want: []wantErr{proto(-32602, "1")}},
		{name: "resume of an unknown session", preConnect: true, frame: req("1", "map/connect", `{"protocolVersion":1,"participantType":"agent","sessionId":"01HZZZZZZZZZZZZZZZZZZZZZZZ","resumeToken":"bogus"}`), want: []wantErr{{code: 1001, id: "1", category: "auth"}}},

		// After map/connect.
		{name: "double connect", frame: req("1", "map/connect", `{"protocolVersion":1,"participantType":"agent"}`), want: []wantErr{proto(-32600, "1")}},
		{name: "get as notification after connect", frame: `{"jsonrpc":"2.0","method":"map/agents/get","params":{"agentId":"nobody"}}`},
		{name: "subscribe.ack sent as a request", frame: req("1", "map/subscribe.ack", `{"subscriptionId":"nope","upToSequence":1}`), want: []wantErr{proto(-32602, "1")}},
		{name: "send to an unknown agent", frame: req("1", "map/send", `{"to":"nobody","payload":1}`), want: []wantErr{{code: 2001, id: "1", category: "routing"}}},
		{name: "send to an unknown agent object", frame: req("1", "map/send", `{"to":{"agent":"nobody"},"payload":1}`), want: []wantErr{{code: 2001, id: "1", category: "routing"}}},
		{name: "send to an unknown federated system", frame: req("1", "map/send", `{"to":"dc9:agent:bob","payload":1}`), want: []wantErr{{code: 5001, id: "1", category: "federation"}}},
		{name: "send to an unknown federated system object", frame: req("1", "map/send", `{"to":{"system":"dc9","agent":"bob"},"payload":1}`), want: []wantErr{{code: 5001, id: "1", category: "federation"}}},
		{name: "send to an unknown scope", frame: req("1", "map/send", `{"to":{"scope":"nowhere"},"payload":1}`), want: []wantErr{{code: 2002, id: "1", category: "routing"}}},
		{name: "send with an ambiguous address", frame: req("1", "map/send", `{"to":{"agent":"a","scope":"s"},"payload":1}`), want: []wantErr{{code: 2004, id: "1", category: "routing"}}},
		{name: "escaped NUL in an agent id", frame: req("1", "map/agents/register", `{"agentId":"a\u0000b"}`), want: []wantErr{proto(-32602, "1")}},
		{name: "lone surrogate in an agent id", frame: req("1", "map/agents/register", `{"agentId":"a\ud800"}`), want: []wantErr{proto(-32602, "1")}},
		{name: "huge unicode agent id", frame: req("1", "map/agents/register", `{"agentId":"`+strings.Repeat("😀", 2000)+`"}`), want: []wantErr{proto(-32602, "1")}},
		{name: "huge unicode scope id", frame: req("1", "map/scopes/create", `{"scopeId":"`+strings.Repeat("é", 5000)+`"}`), want: []wantErr{proto(-32602, "1")}},
		{name: "get of an unknown agent", frame: req("1", "map/agents/get", `{"agentId":"nobody"}`), want: []wantErr{{code: 2001, id: "1", category: "routing"}}},
		{name: "unsubscribe of an unknown subscription", frame: req("1", "map/unsubscribe", `{"subscriptionId":"nope"}`), want: []wantErr{proto(-32602, "1")}},
	}
}

// TestProbe_WebSocketFrames sends every frame probe on its own WebSocket
// and checks the exact reply, that the connection still serves a normal
// request, and that no replicated state moved.
func TestProbe_WebSocketFrames(t *testing.T) {
	srv := startProbeNode(t, nil)
	for _, p := range frameProbes() {
		t.Run(p.name, func(t *testing.T) {
			ws := dialProbe(t, srv)
			if !p.preConnect {
				ws.connectAgent()
			}
			before := markState(srv)
			ws.send(p.frame)
			n := len(p.want)
			if p.batch != nil {
				n = 1
			}
			got := ws.collectUntilSentinel(n)
			checkReplies(t, got, p)
			checkUnchanged(t, srv, before)
			if p.preConnect {
				ws.connectAgent()
			}
			ws.mustCall("map/agents/list", map[string]any{})
		})
	}
}

// checkReplies compares the frames a probe earned with p's expectation.
func checkReplies(t *testing.T, got [][]byte, p frameProbe) {
	t.Helper()
	switch {
	case p.batch != nil:
		if len(got) != 1 {
			t.Fatalf("want one batch reply, got %d frames: %q", len(got), got)
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(got[0], &elems); err != nil {
			t.Fatalf("batch reply is not an array: %s", got[0])
		}
		if len(elems) != len(p.batch) {
			t.Fatalf("want %d batch elements, got %s", len(p.batch), got[0])
		}
		for i, w := range p.batch {
			if w.code == 0 {
				var r rpcReply
				if json.Unmarshal(elems[i], &r) != nil || r.Error != nil || string(r.ID) != w.id {
					t.Fatalf("batch element %d: want a result for id %s, got %s", i, w.id, elems[i])
				}
				continue
			}
			checkError(t, elems[i], w)
		}
	default:
		if len(got) != len(p.want) {
			t.Fatalf("want %d replies, got %d: %q", len(p.want), len(got), got)
		}
		for i, w := range p.want {
			checkError(t, got[i], w)
		}
	}
}

// TestProbe_SessionHijack: map/connect naming another participant's live
// session, without its resumeToken or with a wrong one, is refused (1001)
// and leaves that session attached and working.
func TestProbe_SessionHijack(t *testing.T) {
	srv := startProbeNode(t, nil)
	victim := dialProbe(t, srv)
	res := victim.connectAgent()
	sid, _ := res["sessionId"].(string)
	for name, params := range map[string]string{
		"no token":                    fmt.Sprintf(`{"protocolVersion":1,"participantType":"agent","sessionId":%q}`, sid),
		"wrong token":                 fmt.Sprintf(`{"protocolVersion":1,"participantType":"agent","sessionId":%q,"resumeToken":"forged"}`, sid),
		"participantId of the victim": fmt.Sprintf(`{"protocolVersion":1,"participantType":"agent","participantId":%q}`, res["participantId"]),
	} {
		t.Run(name, func(t *testing.T) {
			thief := dialProbe(t, srv)
			before := markState(srv)
			thief.send(`{"jsonrpc":"2.0","id":1,"method":"map/connect","params":` + params + `}`)
			got := thief.collectUntilSentinel(1)
			if len(got) != 1 {
				t.Fatalf("want one reply, got %q", got)
			}
			checkError(t, got[0], wantErr{code: 1001, id: "1", category: "auth"})
			checkUnchanged(t, srv, before)
			victim.mustCall("map/agents/list", map[string]any{})
		})
	}
}
