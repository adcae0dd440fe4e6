package mapsvc

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

func TestConnect_Errors(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	cases := []struct {
		name   string
		params any
		code   int
		field  string
	}{
		{"no params", nil, rpc.CodeInvalidParams, "protocolVersion"},
		{"version 2", `{"protocolVersion":2,"participantType":"client"}`, rpc.CodeInvalidParams, "protocolVersion"},
		{"version string", `{"protocolVersion":"1","participantType":"client"}`, rpc.CodeInvalidParams, "protocolVersion"},
		{"version fraction", `{"protocolVersion":1.5,"participantType":"client"}`, rpc.CodeInvalidParams, "protocolVersion"},
		{"no type", `{"protocolVersion":1}`, rpc.CodeInvalidParams, "participantType"},
		{"bad type", `{"protocolVersion":1,"participantType":"robot"}`, rpc.CodeInvalidParams, "participantType"},
		{"name not string", `{"protocolVersion":1,"participantType":"client","name":5}`, rpc.CodeInvalidParams, "name"},
		{"bad policy", `{"protocolVersion":1,"participantType":"agent","disconnectPolicy":{"agentBehavior":"vanish"}}`, rpc.CodeInvalidParams, "disconnectPolicy.agentBehavior"},
		{"negative grace", `{"protocolVersion":1,"participantType":"agent","disconnectPolicy":{"agentBehavior":"grace-period","gracePeriodMs":-1}}`, rpc.CodeInvalidParams, "disconnectPolicy.gracePeriodMs"},
		{"reclaim not strings", `{"protocolVersion":1,"participantType":"agent","reclaimAgents":[1]}`, rpc.CodeInvalidParams, "reclaimAgents"},
		{"auth without method", `{"protocolVersion":1,"participantType":"client","auth":{}}`, rpc.CodeInvalidParams, "auth.method"},
		{"auth bearer", `{"protocolVersion":1,"participantType":"client","auth":{"method":"bearer","token":"x"}}`, rpc.CodeMethodNotSupported, ""},
		{"wrong token", `{"protocolVersion":1,"participantType":"client","resumeToken":"zzz.secret","sessionId":"other"}`, rpc.CodeAuthFailed, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c.t = t
			if tc.field == "" {
				e.refused(c, "map/connect", tc.params, tc.code)
				return
			}
			e.refused(c, "map/connect", tc.params, tc.code, tc.field)
		})
	}
}

func TestConnect_BeforeConnectAndUnknownMethods(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	e.refused(c, "map/agents/list", nil, rpc.CodeAuthRequired)
	e.refused(c, "map/agents/register", `{"agentId":"a"}`, rpc.CodeAuthRequired)
	e.refused(c, "map/nope", nil, rpc.CodeMethodNotFound)
	connectAs(c, TypeClient, nil)
	e.refused(c, "map/nope", nil, rpc.CodeMethodNotFound)
	e.refused(c, "x-vendor/thing", nil, rpc.CodeMethodNotFound)
	// A second connect for a new session on the same connection.
	e.refused(c, "map/connect", `{"protocolVersion":1,"participantType":"client"}`, rpc.CodeInvalidRequest)
}

func TestConnect_Result(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Extensions = []Extension{{URI: "urn:map:ext:mail:1", Version: "1.1.0"}}
	})
	c := e.dial()
	res := connectAs(c, TypeClient, map[string]any{"name": "ui", "capabilities": map[string]any{
		"messaging": map[string]any{"canSend": false}, "mail": map[string]any{"enabled": "yes"}}})
	sid, _ := res["sessionId"].(string)
	if res["protocolVersion"] != float64(1) || sid == "" || res["reconnected"] != false {
		t.Fatalf("result %v", res)
	}
	if tok, _ := res["resumeToken"].(string); !strings.HasPrefix(tok, sid+".") {
		t.Fatalf("resume token %q", tok)
	}
	if pid, _ := res["participantId"].(string); !strings.HasPrefix(pid, "client-") {
		t.Fatalf("participantId %q", pid)
	}
	caps := res["capabilities"].(map[string]any)
	if caps["messaging"].(map[string]any)["canSend"] != false || caps["observation"].(map[string]any)["canObserve"] != true {
		t.Fatalf("capabilities %v", caps)
	}
	if caps["lifecycle"].(map[string]any)["canRegister"] != false {
		t.Fatal("client granted canRegister")
	}
	if caps["streaming"].(map[string]any)["supportsAck"] != true {
		t.Fatal("supportsAck not advertised with a fanout")
	}
	if ext := caps["extensions"].([]any); len(ext) != 1 || ext[0].(map[string]any)["uri"] != "urn:map:ext:mail:1" {
		t.Fatalf("extensions %v", caps["extensions"])
	}
	if si := res["systemInfo"].(map[string]any); si["name"] != "concord" || si["nodeId"] != "n1" {
		t.Fatalf("systemInfo %v", si)
	}
	sess, ok := e.reg.Session(sid)
	if !ok || !sess.Connected || sess.HomeNode != "n1" || sess.ParticipantType != TypeClient || sess.Name != "ui" {
		t.Fatalf("registry session %+v", sess)
	}
	if sess.DisconnectPolicy.AgentBehavior != registry.BehaviorGracePeriod {
		t.Fatalf("default policy %+v", sess.DisconnectPolicy)
	}
	if conn, ok := e.svc.Sessions().Conn(sid); !ok || conn == nil {
		t.Fatal("session not in the local table")
	}
	if f := e.fanout.entries(); !slices.Contains(f, "attach "+sid) {
		t.Fatalf("fanout not attached: %v", f)
	}
	// Withdrawn capability gates its method.
	e.refused(c, "map/send", `{"to":{"agent":"x"}}`, rpc.CodePermissionDenied)
	// Type gating: a client cannot register.
	e.refused(c, "map/agents/register", `{}`, rpc.CodePermissionDenied)
}

func TestConnect_AuthNoneAndRefresh(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	res := connectAs(c, TypeAgent, map[string]any{"participantId": "agent-7", "auth": map[string]any{"method": "none"}})
	if res["participantId"] != "agent-7" || res["principal"].(map[string]any)["id"] != "anonymous" {
		t.Fatalf("result %v", res)
	}
	e.refused(c, "map/auth/refresh", `{}`, rpc.CodeInvalidParams, "refreshToken")
	e.refused(c, "map/auth/refresh", `{"refreshToken":5}`, rpc.CodeInvalidParams, "refreshToken")
	for _, p := range []string{`{"refreshToken":"r"}`, `{"credential":"c","method":"none"}`, `{"token":"t"}`} {
		e.refused(c, "map/auth/refresh", p, rpc.CodeMethodNotSupported)
	}
}

func TestDisconnect(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	res := connectAs(c, TypeAgent, map[string]any{"disconnectPolicy": map[string]any{"agentBehavior": "orphan"}})
	sid := res["sessionId"].(string)
	c.must("map/agents/register", `{"agentId":"a1"}`)
	e.refused(c, "map/disconnect", `{"reason":7}`, rpc.CodeInvalidParams, "reason")
	out := c.must("map/disconnect", `{"reason":"bye"}`)
	sess := out["session"].(map[string]any)
	if out["acknowledged"] != true || sess["id"] != sid || sess["closedAt"] == nil || out["resumeToken"] != res["resumeToken"] {
		t.Fatalf("disconnect result %v", out)
	}
	if a, _ := e.reg.Agent("a1"); a.State != registry.StateOrphaned {
		t.Fatalf("agent after disconnect %+v", a)
	}
	if _, ok := e.svc.Sessions().Conn(sid); ok {
		t.Fatal("session still attached locally")
	}
	e.refused(c, "map/agents/list", nil, rpc.CodeAuthRequired)
	// The connection can resume the closed session.
	again := connectAs(c, TypeAgent, map[string]any{"resumeToken": res["resumeToken"]})
	if again["reconnected"] != true || again["sessionId"] != sid || !slices.Equal(toStrings(again["ownedAgents"]), []string{"a1"}) {
		t.Fatalf("resume after disconnect %v", again)
	}
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

func TestResume_RestoresAgentsAfterConnectionLoss(t *testing.T) {
	e := newEnv(t)
	c1 := e.dial()
	res := connectAs(c1, TypeAgent, map[string]any{"participantId": "agent-a", "name": "A"})
	sid, tok := res["sessionId"].(string), res["resumeToken"].(string)
	c1.must("map/agents/register", `{"agentId":"agent-a","name":"A","role":"requester"}`)

	// Abrupt loss: Closed detaches; the default grace-period policy orphans.
	_ = c1.conn.Close("network down")
	<-c1.conn.Done()
	eventually(t, 5*time.Second, func() error {
		if a, _ := e.reg.Agent("agent-a"); a.State != registry.StateOrphaned {
			return fmt.Errorf("agent state %q", a.State)
		}
		return nil
	})
	if s, _ := e.reg.Session(sid); s.Connected {
		t.Fatal("session still connected")
	}

	c2 := e.dial()
	// Wrong token for a known session: 1001, nothing written.
	e.refused(c2, "map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "resumeToken": sid + ".forged"}, rpc.CodeAuthFailed)
	e.refused(c2, "map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "sessionId": sid}, rpc.CodeAuthFailed)
	e.refused(c2, "map/connect", map[string]any{"protocolVersion": 1, "participantType": "client", "resumeToken": tok}, rpc.CodeAuthFailed)

	// The SDK's AgentConnection resumes with participantId + resumeToken only.
	r := connectAs(c2, TypeAgent, map[string]any{"participantId": "agent-a", "resumeToken": tok})
	if r["reconnected"] != true || r["sessionId"] != sid || r["participantId"] != "agent-a" {
		t.Fatalf("resume result %v", r)
	}
	if rec := r["reclaimedAgents"].([]any); len(rec) != 1 || rec[0].(map[string]any)["id"] != "agent-a" {
		t.Fatalf("reclaimedAgents %v", r["reclaimedAgents"])
	}
	a, _ := e.reg.Agent("agent-a")
	if a.State != registry.StateRegistered || a.OwnerID != "agent-a" || a.HomeNode != "n1" || a.SessionID != sid {
		t.Fatalf("agent after resume %+v", a)
	}
	// The SDK then repeats its register: idempotent, same agent.
	reg := c2.must("map/agents/register", `{"agentId":"agent-a","name":"A"}`)
	if agentOf(reg)["id"] != "agent-a" {
		t.Fatalf("re-register %v", reg)
	}
	if n := len(e.reg.Agents()); n != 1 {
		t.Fatalf("%d agents", n)
	}
	attaches := 0
	for _, x := range e.fanout.entries() {
		if x == "attach "+sid {
			attaches++
		}
	}
	if f := e.fanout.entries(); !slices.Contains(f, "detach "+sid) || attaches != 2 {
		t.Fatalf("fanout attach/detach sequence %v", f)
	}
	// Reconnect on the same transport (the SDK's reconnect()).
	same := connectAs(c2, TypeAgent, map[string]any{"resumeToken": tok})
	if same["reconnected"] != true || same["sessionId"] != sid {
		t.Fatalf("same-connection reconnect %v", same)
	}
}

func TestResume_UnknownSessionStartsFresh(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	r := connectAs(c, TypeClient, map[string]any{"sessionId": "gone", "resumeToken": "gone.secret"})
	if r["reconnected"] != false || r["sessionId"] == "gone" {
		t.Fatalf("result %v", r)
	}
}

func TestResume_TakeoverClosesOldConnection(t *testing.T) {
	e := newEnv(t)
	c1 := e.dial()
	res := connectAs(c1, TypeClient, nil)
	c2 := e.dial()
	r := connectAs(c2, TypeClient, map[string]any{"sessionId": res["sessionId"], "resumeToken": res["resumeToken"]})
	if r["reconnected"] != true {
		t.Fatalf("takeover %v", r)
	}
	select {
	case <-c1.conn.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("old connection not closed")
	}
	// The old connection's Closed must not detach the session now held by c2.
	sid := res["sessionId"].(string)
	eventually(t, 5*time.Second, func() error {
		conn, ok := e.svc.Sessions().Conn(sid)
		if !ok {
			return fmt.Errorf("session lost from the local table")
		}
		if s, _ := e.reg.Session(sid); !s.Connected {
			return fmt.Errorf("session detached by the old connection")
		}
		_ = conn
		return nil
	})
	c2.must("map/agents/list", nil)
}

// The SDK's AgentConnection resumes with participantId = its agent id, even
// when the first connect gave the session another participant id; an agent
// owned by a different session does not unlock the session.
func TestResume_ParticipantIDMayBeAnOwnedAgent(t *testing.T) {
	e := newEnv(t)
	c1 := e.dial()
	res := connectAs(c1, TypeAgent, map[string]any{"name": "no-participant-id"})
	sid, tok := res["sessionId"].(string), res["resumeToken"].(string)
	c1.must("map/agents/register", `{"agentId":"worker-1"}`)
	other := e.dial()
	connectAs(other, TypeAgent, nil)
	other.must("map/agents/register", `{"agentId":"stranger"}`)
	_ = c1.conn.Close("network down")
	<-c1.conn.Done()
	// The close proposes the session's detach asynchronously: let it apply
	// before measuring that the refused connect writes nothing.
	eventually(t, 5*time.Second, func() error {
		if s, _ := e.reg.Session(sid); s.Connected {
			return fmt.Errorf("session %s still connected", sid)
		}
		return nil
	})

	c2 := e.dial()
	e.refused(c2, "map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent",
		"participantId": "stranger", "resumeToken": tok}, rpc.CodeAuthFailed)
	r := connectAs(c2, TypeAgent, map[string]any{"participantId": "worker-1", "resumeToken": tok})
	if r["reconnected"] != true || r["sessionId"] != sid {
		t.Fatalf("resume with an owned agent's id: %v", r)
	}
}

// A resume of a session this replica does not know asks Barrier to catch
// up once before starting afresh; a known session needs no barrier.
func TestResume_UnknownSessionCatchesUpFirst(t *testing.T) {
	var barriers atomic.Int32
	e := newEnv(t, func(c *Config) {
		c.Barrier = func(context.Context) error { barriers.Add(1); return nil }
	})
	c1 := e.dial()
	res := connectAs(c1, TypeAgent, map[string]any{"participantId": "agent-b"})
	sid, tok := res["sessionId"].(string), res["resumeToken"].(string)
	if n := barriers.Load(); n != 0 {
		t.Fatalf("%d barriers for a fresh connect", n)
	}
	_ = c1.conn.Close("network down")
	<-c1.conn.Done()
	c2 := e.dial()
	if r := connectAs(c2, TypeAgent, map[string]any{"participantId": "agent-b", "resumeToken": tok}); r["reconnected"] != true || r["sessionId"] != sid {
		t.Fatalf("resume %v", r)
	}
	if n := barriers.Load(); n != 0 {
		t.Fatalf("%d barriers for a known session", n)
	}
	c3 := e.dial()
	if r := connectAs(c3, TypeClient, map[string]any{"sessionId": "gone", "resumeToken": "gone.secret"}); r["reconnected"] != false {
		t.Fatalf("unknown session %v", r)
	}
	if n := barriers.Load(); n != 1 {
		t.Fatalf("%d barriers for an unknown session, want 1", n)
	}
}
