package mapsvc

import (
	"context"
	"testing"

	"github.com/concordmap/concord/node/rpc"
)

// fakeAuth: "sys" is a system credential for any id, "team" an agent
// credential for team-* that may only send, "ann" binds exactly "ann";
// none is anonymous agents and clients.
type fakeAuth struct{}

func (fakeAuth) Methods() []string { return []string{AuthAPIKey, AuthNone} }
func (fakeAuth) Authenticate(_ context.Context, method, cred string) (*Principal, error) {
	switch {
	case method == AuthNone:
		return &Principal{ID: "anonymous", Method: AuthNone, Types: []string{TypeAgent, TypeClient}}, nil
	case method == AuthAPIKey && cred == "sys":
		return &Principal{ID: "key:sys", Method: method, ParticipantIDPattern: "*", Types: []string{TypeSystem, TypeGateway}}, nil
	case method == AuthAPIKey && cred == "team":
		return &Principal{ID: "key:team", Method: method, ParticipantIDPattern: "team-*", Types: []string{TypeAgent},
			Capabilities: []string{"messaging.canSend", "lifecycle.canRegister"}}, nil
	case method == AuthAPIKey && cred == "ann":
		return &Principal{ID: "key:ann", Method: method, ParticipantIDPattern: "ann", Types: []string{TypeAgent, TypeClient}}, nil
	}
	return nil, rpc.NewError(rpc.CodeAuthFailed, "Invalid credentials")
}

func TestConnect_PrincipalBinding(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Authenticator = fakeAuth{} })
	key := func(cred string) map[string]any { return map[string]any{"method": "api-key", "token": cred} }
	connect := func(params map[string]any, code int, field ...string) map[string]any {
		t.Helper()
		c := e.dial()
		p := map[string]any{"protocolVersion": 1, "participantType": TypeAgent}
		for k, v := range params {
			p[k] = v
		}
		if code != 0 {
			c.fails("map/connect", p, code, field...)
			return nil
		}
		return c.must("map/connect", p)
	}
	// system and gateway need a credential that allows them.
	connect(map[string]any{"participantType": TypeSystem}, rpc.CodePermissionDenied)
	connect(map[string]any{"participantType": TypeGateway}, rpc.CodePermissionDenied)
	connect(map[string]any{"participantType": TypeSystem, "auth": key("team")}, rpc.CodePermissionDenied)
	connect(map[string]any{"participantType": TypeSystem, "auth": key("bogus")}, rpc.CodeAuthFailed)
	if r := connect(map[string]any{"participantType": TypeSystem, "auth": key("sys")}, 0); r["principal"].(map[string]any)["id"] != "key:sys" {
		t.Fatalf("principal %v", r["principal"])
	}
	// The participant id is bound to the credential.
	connect(map[string]any{"participantId": "boss", "auth": key("team")}, rpc.CodeAuthFailed)
	r := connect(map[string]any{"participantId": "team-1", "auth": key("team")}, 0)
	caps := r["capabilities"].(map[string]any)
	if caps["lifecycle"].(map[string]any)["canStop"] != false || caps["messaging"].(map[string]any)["canSend"] != true {
		t.Fatalf("capabilities not narrowed to the credential: %v", caps)
	}
	if r := connect(map[string]any{"auth": key("team")}, 0); r["participantId"].(string)[:5] != "team-" {
		t.Fatalf("generated id %v outside the credential's namespace", r["participantId"])
	}
	if r := connect(map[string]any{"auth": key("ann")}, 0); r["participantId"] != "ann" {
		t.Fatalf("exact credential got participant %v", r["participantId"])
	}
	// Anonymous participants cannot take a held id.
	first := e.dial()
	res := connectAs(first, TypeAgent, map[string]any{"participantId": "alice"})
	first.must("map/agents/register", `{"agentId":"a1"}`)
	connect(map[string]any{"participantId": "alice"}, rpc.CodeAuthFailed)
	connect(map[string]any{"participantId": "ann"}, rpc.CodeAuthFailed) // held by the credentialed "ann"
	// ... but the holder resumes with its token.
	_ = first.conn.Close("bye")
	<-first.conn.Done()
	connect(map[string]any{"participantId": "alice", "resumeToken": res["resumeToken"]}, 0)
}

func TestAuthRefresh(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Authenticator = fakeAuth{} })
	c := e.dial()
	c.must("map/connect", map[string]any{"protocolVersion": 1, "participantType": TypeAgent, "participantId": "team-1",
		"auth": map[string]any{"method": "api-key", "token": "team"}})
	res := c.must("map/auth/refresh", `{"refreshToken":"team"}`)
	if res["success"] != true || res["principal"].(map[string]any)["id"] != "key:team" {
		t.Fatalf("refresh %v", res)
	}
	c.fails("map/auth/refresh", `{"credential":"ann","method":"api-key"}`, rpc.CodeAuthFailed) // another principal
	c.fails("map/auth/refresh", `{"token":"bogus"}`, rpc.CodeAuthFailed)
	anon := e.dial()
	connectAs(anon, TypeAgent, nil)
	anon.fails("map/auth/refresh", `{"token":"team"}`, rpc.CodeMethodNotSupported)
}
