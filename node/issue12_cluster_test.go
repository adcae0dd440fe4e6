package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/rpc"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestCluster_Issue12 runs the access and limit cases of issue 12 on one
// two-node cluster (one start for all: clusters are the slow part), with
// participants on node 2 acting on node 1's agents.
func TestCluster_Issue12(t *testing.T) {
	servers := startCluster(t, 2)
	n1, n2 := servers[0], servers[1]
	t.Run("origin allowlist", func(t *testing.T) { testMAPOriginAllowlist(t, n1, n2) })
	t.Run("unknown methods share one metric label", func(t *testing.T) { testUnknownMethodsMetrics(t, n1) })

	inbox := make(chan json.RawMessage, 8)
	alice := dialWith(t, n1, notifyFunc(func(method string, params json.RawMessage) {
		if method == "map/message" {
			inbox <- params
		}
	}))
	alice.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "participantId": "alice"})
	alice.call("map/agents/register", map[string]any{"agentId": "alice"})
	alice.call("map/scopes/create", map[string]any{"scopeId": "solo"})
	alice.call("map/scopes/join", map[string]any{"scopeId": "solo", "agentId": "alice"})

	bob := dial(t, n2)
	bob.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "participantId": "bob"})
	bob.call("map/agents/register", map[string]any{"agentId": "bob"})
	viewer := dial(t, n2)
	viewer.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "client"})
	waitAgent(t, n2, "alice")
	waitAgent(t, n1, "bob")

	t.Run("unknown agent is 2001 on another node", func(t *testing.T) {
		for _, c := range []*client{bob, viewer} {
			for _, m := range []string{"map/agents/update", "map/agents/unregister", "map/agents/stop"} {
				c.fails(t, m, map[string]any{"agentId": "ghost"}, rpc.CodeAgentNotFound)
			}
		}
		viewer.fails(t, "map/agents/update", map[string]any{"agentId": "alice"}, rpc.CodePermissionDenied)
		bob.fails(t, "map/agents/update", map[string]any{"agentId": "alice", "name": "mine"}, rpc.CodePermissionDenied)
	})
	t.Run("permissions hold across nodes", func(t *testing.T) {
		alice.call("map/scopes/create", map[string]any{"scopeId": "club", "joinPolicy": "invite"})
		waitScope(t, n2, "club")
		bob.fails(t, "map/scopes/delete", map[string]any{"scopeId": "solo"}, rpc.CodePermissionDenied)
		bob.fails(t, "map/scopes/join", map[string]any{"scopeId": "club", "agentId": "bob"}, rpc.CodePermissionDenied)
		for _, m := range []string{"map/agents/stop", "map/agents/suspend", "map/agents/unregister"} {
			bob.fails(t, m, map[string]any{"agentId": "alice"}, rpc.CodePermissionDenied)
		}
		alice.call("map/scopes/join", map[string]any{"scopeId": "club", "agentId": "bob"}) // the owner invites
	})
	t.Run("send to a scope of only the sender succeeds", func(t *testing.T) {
		res := alice.call("map/send", map[string]any{"to": map[string]any{"scope": "solo"}, "payload": 1})
		if d, ok := res["delivered"].([]any); !ok || len(d) != 0 {
			t.Fatalf("send to own scope: %v, want delivered []", res)
		}
		bob.fails(t, "map/send", map[string]any{"to": map[string]any{"participant": "nobody"}}, rpc.CodeAddressNotFound)
	})
	t.Run("meta.from is set by the server across nodes", func(t *testing.T) {
		bob.call("map/send", map[string]any{"to": "alice", "payload": 1, "meta": map[string]any{"from": "alice", "priority": "low"}})
		select {
		case m := <-inbox:
			var got struct {
				Message struct {
					From string
					Meta map[string]any
				}
			}
			_ = json.Unmarshal(m, &got)
			if got.Message.From != "bob" || got.Message.Meta["from"] != "bob" || got.Message.Meta["priority"] != "low" {
				t.Fatalf("delivered %s", m)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("alice never received bob's message")
		}
	})
	t.Run("api key made on node 1 works on node 2 until revoked on node 1", func(t *testing.T) {
		revoked := make(chan json.RawMessage, 1)
		sys := dialWith(t, n2, notifyFunc(func(method string, params json.RawMessage) {
			if method == "map/auth/revoked" {
				revoked <- params
			}
		}))
		sys.fails(t, "map/connect", map[string]any{"protocolVersion": 1, "participantType": "system"}, rpc.CodePermissionDenied)
		res, err := n1.ACLAdmin().CreateToken(context.Background(), &concordv1.AclCreateTokenRequest{
			ParticipantIdPattern: "ops-*", ParticipantTypes: []string{"system"}, Description: "test"})
		if err != nil {
			t.Fatal(err)
		}
		auth := map[string]any{"method": "api-key", "token": res.GetToken()}
		eventually(t, 10*time.Second, func() error {
			if _, ok := aclKey(n2, res.GetKey().GetId()); !ok {
				return fmt.Errorf("key not replicated to node 2 yet")
			}
			return nil
		})
		sys.fails(t, "map/connect", map[string]any{"protocolVersion": 1, "participantType": "system", "participantId": "alice", "auth": auth}, rpc.CodeAuthFailed)
		sys.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "system", "participantId": "ops-1", "auth": auth})
		raw := rawSession(t, n2, map[string]any{"protocolVersion": 1, "participantType": "system", "participantId": "ops-raw", "auth": auth})
		sys.call("map/agents/update", map[string]any{"agentId": "alice", "name": "renamed by ops"})
		if _, err := n1.ACLAdmin().RevokeToken(context.Background(), &concordv1.AclRevokeTokenRequest{Id: res.GetKey().GetId()}); err != nil {
			t.Fatal(err)
		}
		// The open session on node 2 is told, refused, then closed.
		select {
		case p := <-revoked:
			var got struct {
				Reason        string
				GracePeriodMs int64
			}
			_ = json.Unmarshal(p, &got)
			if got.Reason != "credential_revoked" || got.GracePeriodMs <= 0 {
				t.Fatalf("map/auth/revoked %s", p)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the session on node 2 was not told of the revocation")
		}
		sys.fails(t, "map/agents/list", map[string]any{}, rpc.CodeAuthFailed)
		select {
		case <-sys.conn.Done():
		case <-time.After(15 * time.Second):
			t.Fatal("the session of a revoked key is still open on node 2")
		}
		// On the wire: the notification, then a close frame with the MAP error.
		if code, text := readUntilClose(t, raw, "map/auth/revoked"); code != websocket.ClosePolicyViolation || text != "MAP error 1001: credential revoked" {
			t.Fatalf("closed with %d %q, want 1008 and the MAP error", code, text)
		}
		again := dial(t, n1)
		eventually(t, 10*time.Second, func() error {
			if _, ok := aclKey(n1, res.GetKey().GetId()); ok {
				return fmt.Errorf("revocation not on node 1 yet")
			}
			return nil
		})
		again.fails(t, "map/connect", map[string]any{"protocolVersion": 1, "participantType": "system", "participantId": "ops-2", "auth": auth}, rpc.CodeAuthFailed)
	})
	t.Run("nobody connects as another participant", func(t *testing.T) {
		imp := dial(t, n2)
		imp.fails(t, "map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "participantId": "alice"}, rpc.CodeAuthFailed)
	})
	t.Run("message events only reach the parties", func(t *testing.T) {
		events := make(chan json.RawMessage, 64)
		spy := dialWith(t, n2, notifyFunc(func(method string, params json.RawMessage) {
			if method == "map/event" {
				events <- params
			}
		}))
		spy.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "client", "participantId": "spy"})
		spy.call("map/subscribe", map[string]any{"filter": map[string]any{"eventTypes": []string{"message_sent", "message_delivered", "agent_registered"}}})
		alice.call("map/send", map[string]any{"to": "bob", "payload": "secret"})
		bob.call("map/agents/register", map[string]any{"agentId": "marker"})
		for {
			select {
			case ev := <-events:
				var e struct{ Event struct{ Type string } }
				_ = json.Unmarshal(ev, &e)
				switch e.Event.Type {
				case "agent_registered":
					return // the marker came after the message: nothing leaked
				default:
					t.Fatalf("a participant not party to the message saw %s", ev)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("marker event never arrived")
			}
		}
	})
	t.Run("agent permission layers hold on every node", func(t *testing.T) { testAgentPermissionLayers(t, n1, n2, alice, bob) })
	t.Run("map/permissions/update on node 1 narrows a session on node 2", func(t *testing.T) { testPermissionsUpdate(t, n1, n2, bob) })
	t.Run("client permissions set on node 1 hold on node 2", func(t *testing.T) { testClientPermissions(t, n1, n2, bob) })
	t.Run("id rules on every node", func(t *testing.T) {
		for _, c := range []*client{alice, bob} {
			c.fails(t, "map/agents/register", map[string]any{"agentId": strings.Repeat("x", 300)}, rpc.CodeInvalidParams)
			c.fails(t, "map/scopes/create", map[string]any{"scopeId": "a\x00b"}, rpc.CodeInvalidParams)
		}
	})
}

// testUnknownMethodsMetrics sends 3,000 invented method names before
// map/connect (bounded load) and checks /metrics stays small.
func testUnknownMethodsMetrics(t *testing.T, srv *node.Server) {
	dialer := websocket.Dialer{TLSClientConfig: tlstest.ClientTLS("dev", "")}
	ws, _, err := dialer.Dial(srv.MAPURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	const n = 3000
	go func() {
		for i := range n {
			if ws.WriteMessage(websocket.TextMessage, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"x/%d"}`, i, i)) != nil {
				return
			}
		}
	}()
	_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	for range n {
		if _, _, err := ws.ReadMessage(); err != nil {
			t.Fatalf("read: %v", err)
		}
	}
	resp, err := httpsClient("dev", "").Get("https://" + srv.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if strings.Contains(string(body), `method="x/`) || len(body) > 512<<10 {
		t.Fatalf("/metrics is %d bytes and lists invented methods", len(body))
	}
	if !strings.Contains(string(body), `concord_rpc_requests_total{code="-32601",method="(unknown)"}`) {
		t.Fatal("unknown methods not counted")
	}
}

// aclKey looks an API key up in srv's replica through the admin API.
func aclKey(srv *node.Server, id string) (*concordv1.ApiKey, bool) {
	res, _ := srv.ACLAdmin().ListTokens(context.Background(), &concordv1.AclListTokensRequest{})
	for _, k := range res.GetKeys() {
		if k.GetId() == id {
			return k, true
		}
	}
	return nil, false
}

// waitScope waits until srv's replica holds scope id.
func waitScope(t *testing.T, srv *node.Server, id string) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		if _, ok := srv.Registry().Scope(id); !ok {
			return fmt.Errorf("scope %s not on this node yet", id)
		}
		return nil
	})
}

// waitAgent waits until srv's replica holds agent id.
func waitAgent(t *testing.T, srv *node.Server, id string) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		if _, ok := srv.Registry().Agent(id); !ok {
			return fmt.Errorf("agent %s not on this node yet", id)
		}
		return nil
	})
}

// fails calls method and checks the MAP error code.
func (c *client) fails(t *testing.T, method string, params any, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	raw, err := c.conn.Call(ctx, method, params)
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != code {
		t.Fatalf("%s %v: result %s err %v, want error %d", method, params, raw, err, code)
	}
}

// testAgentPermissionLayers: permissionOverrides set on node 1 and node 2
// are enforced by the other node in send, list/get, subscriptions and
// replay.
func testAgentPermissionLayers(t *testing.T, n1, n2 *node.Server, alice, bob *client) {
	carol := dial(t, n1)
	carol.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "participantId": "carol"})
	carol.call("map/agents/register", map[string]any{"agentId": "carol",
		"permissionOverrides": map[string]any{"acceptsFrom": map[string]any{"agents": map[string]any{"include": []string{"alice"}}}}})
	waitAgent(t, n2, "carol")
	bob.fails(t, "map/send", map[string]any{"to": map[string]any{"agent": "carol"}, "payload": 1}, rpc.CodePermissionDenied)
	alice.call("map/send", map[string]any{"to": map[string]any{"agent": "carol"}, "payload": 1})

	events := make(chan json.RawMessage, 64)
	dave := dialWith(t, n2, notifyFunc(func(method string, params json.RawMessage) {
		if method == "map/event" {
			events <- params
		}
	}))
	dave.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "participantId": "dave"})
	dave.call("map/agents/register", map[string]any{"agentId": "dave",
		"permissionOverrides": map[string]any{"canSee": map[string]any{"agents": map[string]any{"include": []string{"bob", "seen"}}}}})
	dave.call("map/subscribe", map[string]any{"filter": map[string]any{"eventTypes": []string{"agent_registered"}}})
	alice.call("map/agents/register", map[string]any{"agentId": "unseen"})
	waitAgent(t, n2, "unseen")
	bob.call("map/agents/register", map[string]any{"agentId": "seen"})
	for done := false; !done; {
		select {
		case ev := <-events:
			var e struct {
				Event struct {
					Data struct{ Agent struct{ ID string } }
				}
			}
			_ = json.Unmarshal(ev, &e)
			switch e.Event.Data.Agent.ID {
			case "seen":
				done = true
			case "unseen":
				t.Fatalf("dave's canSee hides %s, yet its event arrived on node 2", ev)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the visible agent's event never arrived")
		}
	}
	got := []string{}
	for _, a := range dave.call("map/agents/list", map[string]any{})["agents"].([]any) {
		got = append(got, a.(map[string]any)["id"].(string))
	}
	if strings.Join(got, ",") != "bob,dave,seen" {
		t.Fatalf("dave lists %v, want bob,dave,seen", got)
	}
	dave.fails(t, "map/agents/get", map[string]any{"agentId": "unseen"}, rpc.CodeAgentNotFound)
	replayed := dave.call("map/replay", map[string]any{"filter": map[string]any{"eventTypes": []string{"agent_registered"}}, "limit": 1000})
	for _, ev := range replayed["events"].([]any) {
		b, _ := json.Marshal(ev)
		if strings.Contains(string(b), `"unseen"`) || strings.Contains(string(b), `"carol"`) {
			t.Fatalf("replay on node 2 shows an agent dave's canSee hides: %s", b)
		}
	}
}

// testPermissionsUpdate: a system participant on node 1 withdraws
// messaging.canSend from bob, connected to node 2; bob's open session is
// refused at once, then allowed again.
func testPermissionsUpdate(t *testing.T, n1, n2 *node.Server, bob *client) {
	res, err := n1.ACLAdmin().CreateToken(context.Background(), &concordv1.AclCreateTokenRequest{
		ParticipantIdPattern: "root", ParticipantTypes: []string{"system"}})
	if err != nil {
		t.Fatal(err)
	}
	sys := dial(t, n1).connectSystem(t, res.GetToken())
	bob.fails(t, "map/permissions/update", map[string]any{"clientId": "bob", "permissions": map[string]any{}}, rpc.CodePermissionDenied)
	var before float64
	if w, ok := sys.call("map/replay", map[string]any{"filter": map[string]any{"eventTypes": []string{"permissions_client_updated"}}})["events"].([]any); ok {
		before = float64(len(w))
	}
	send := map[string]any{"to": map[string]any{"agent": "alice"}, "payload": 1}
	bob.call("map/send", send)
	out := sys.call("map/permissions/update", map[string]any{"clientId": "bob",
		"permissions": map[string]any{"messaging": map[string]any{"canSend": false}}})
	if eff, _ := out["effectivePermissions"].(map[string]any); out["success"] != true || eff["messaging"].(map[string]any)["canSend"] != false {
		t.Fatalf("permissions/update %v", out)
	}
	eventually(t, 10*time.Second, func() error {
		if tryCall(bob, "map/send", send) == nil {
			return errors.New("bob still sends on node 2")
		}
		return nil
	})
	bob.fails(t, "map/send", send, rpc.CodePermissionDenied)
	sys.call("map/permissions/update", map[string]any{"clientId": "bob",
		"permissions": map[string]any{"messaging": map[string]any{"canSend": true}}})
	eventually(t, 10*time.Second, func() error { return tryCall(bob, "map/send", send) })
	eventually(t, 10*time.Second, func() error { // both changes are in the replicated event window of node 2
		evs, _ := dial(t, n2).connectSystem(t, res.GetToken()).call("map/replay",
			map[string]any{"filter": map[string]any{"eventTypes": []string{"permissions_client_updated"}}})["events"].([]any)
		if float64(len(evs)) != before+2 {
			return fmt.Errorf("%d permissions_client_updated events on node 2, want %v", len(evs), before+2)
		}
		return nil
	})
}

// connectSystem connects c as system participant "root" with an API key.
func (c *client) connectSystem(t *testing.T, token string) *client {
	t.Helper()
	c.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "system", "participantId": "root",
		"auth": map[string]any{"method": "api-key", "token": token}})
	return c
}

// rawSession opens a WebSocket to srv and completes map/connect with
// params, for tests that look at frames and close codes.
func rawSession(t *testing.T, srv *node.Server, params map[string]any) *websocket.Conn {
	t.Helper()
	dialer := websocket.Dialer{TLSClientConfig: tlstest.ClientTLS("dev", "")}
	ws, _, err := dialer.Dial(srv.MAPURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "map/connect", "params": params})
	if err := ws.WriteMessage(websocket.TextMessage, req); err != nil {
		t.Fatal(err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, b, err := ws.ReadMessage(); err != nil || !strings.Contains(string(b), `"sessionId"`) {
		t.Fatalf("map/connect: %s %v", b, err)
	}
	return ws
}

// readUntilClose reads frames until the server closes, checking that a
// notification of method came first, and returns the close code and text.
func readUntilClose(t *testing.T, ws *websocket.Conn, method string) (int, string) {
	t.Helper()
	_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	seen := false
	for {
		_, b, err := ws.ReadMessage()
		var ce *websocket.CloseError
		switch {
		case errors.As(err, &ce):
			if !seen {
				t.Fatalf("closed (%d %q) before %s", ce.Code, ce.Text, method)
			}
			return ce.Code, ce.Text
		case err != nil:
			t.Fatalf("read: %v", err)
		}
		seen = seen || strings.Contains(string(b), `"method":"`+method+`"`)
	}
}
