package mapsvc

import (
	"encoding/json"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

// Params decoders get arbitrary JSON from participants: they must never
// panic, and every refusal must be -32602 (1xxx codes are decided later).

var fuzzSeeds = []string{
	``, `null`, `{}`, `[]`, `"x"`, `1`, `{"a":`, `{"protocolVersion":1,"participantType":"agent"}`,
	`{"protocolVersion":1e400}`, `{"protocolVersion":-0,"participantType":null}`,
	`{"disconnectPolicy":{"agentBehavior":"grace-period","gracePeriodMs":1e20}}`,
	`{"capabilities":{"messaging":{"canSend":false},"x":[]}}`, `{"auth":{"method":"none"}}`,
	`{"agentId":"a","scopes":["s",null],"persistentIdentity":{"persistentId":7}}`,
	`{"filter":{"states":["idle"],"hasChildren":"no"},"limit":1.5,"cursor":{}}`,
	`{"initialMessage":{"payload":1},"ttlMinutes":0,"requestedScopes":[""]}`,
	`{"agentId":"a","state":"x-Bad","metadata":null,"visibility":"public"}`,
	"{\"name\":\"\xff\"}",
}

func checkParamsErr(t *testing.T, err *rpc.Error) {
	t.Helper()
	if err != nil && err.Code != rpc.CodeInvalidParams {
		t.Fatalf("decoder error code %d (%s), want -32602", err.Code, err.Message)
	}
}

func FuzzConnectParams(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cp, err := decodeConnect(json.RawMessage(b))
		checkParamsErr(t, err)
		var caps Capabilities
		caps.narrow(cp.capabilities)
		caps.narrow(json.RawMessage(b))
	})
}

func FuzzRegisterParams(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, b []byte, spawn bool) {
		_, err := decodeRegister(json.RawMessage(b), spawn)
		checkParamsErr(t, err)
	})
}

func FuzzUpdateParams(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := decodeUpdate(json.RawMessage(b))
		checkParamsErr(t, err)
	})
}

func FuzzListParams(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	s := &Service{cfg: DefaultConfig()}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := decodeParams(json.RawMessage(b))
		flt := decodeAgentFilter(p)
		s.page(p)
		checkParamsErr(t, p.err())
		// The filter also reads agents' raw JSON: feed it the input.
		a := registry.Agent{ID: "a", CapabilityDescriptor: b, PersistentIdentity: b}
		flt.match(&a, map[string]bool{})
		relationshipEdges(&registry.Agent{ID: "a", Relationships: b}, map[string]bool{"a": true})
	})
}

// FuzzMethodParams sends arbitrary params objects to every method of the
// table on one agent session: whatever the params, the answer is a result
// or a MAP error, never an internal error (-32603, which is also what a
// recovered panic becomes).
func FuzzMethodParams(f *testing.F) {
	e := newEnv(f)
	c := e.dial()
	c.must("map/connect", `{"protocolVersion":1,"participantType":"agent"}`)
	c.must("map/agents/register", `{"agentId":"a"}`)
	c.must("map/scopes/create", `{"scopeId":"s"}`)
	var methods []string
	for name := range e.svc.methods {
		if name != "map/disconnect" { // it would end the session the fuzzer uses
			methods = append(methods, name)
		}
	}
	slices.Sort(methods)
	for i := range methods {
		for _, s := range fuzzSeeds {
			f.Add(uint8(i), []byte(s))
		}
		f.Add(uint8(i), []byte(`{"agentId":"a","scopeId":"s","subscriptionId":"x","to":"a","limit":1}`))
	}
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		if !json.Valid(b) || !utf8.Valid(b) || len(b) == 0 || b[0] != '{' {
			return // the rpc layer refuses these before any handler (FuzzDecodeFrame)
		}
		method := methods[int(which)%len(methods)]
		_, err := (&client{t: t, conn: c.conn}).call(method, json.RawMessage(b))
		if err != nil && err.Code == rpc.CodeInternal {
			t.Fatalf("%s %s: internal error %s (%+v)", method, b, err.Message, err.Data)
		}
	})
}
