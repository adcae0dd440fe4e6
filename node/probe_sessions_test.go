package node_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/concordmap/concord/node"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestProbe_AnonymousSessionFlood: one address opening anonymous sessions
// in a connect/close loop gets 4001 (retryable, retryAfterMs) past the
// burst, and the refusals write nothing; a resume of a session it holds
// and an authenticated connect from the same address still work.
func TestProbe_AnonymousSessionFlood(t *testing.T) {
	const burst = 4
	srv := startProbeNode(t, func(c *node.Config) {
		c.MAP.AnonymousSessionRate = 0.001 // no refill within the test
		c.MAP.AnonymousSessionBurst = burst
	})
	var sid, token string
	for i := range burst {
		ws := dialProbe(t, srv)
		var res map[string]any
		if i == 1 {
			// Naming a session nobody knows: charged once (before the
			// catch-up barrier), then it starts afresh without a second
			// charge, or the last connect of the burst would be refused.
			res = ws.mustCall("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent",
				"sessionId": "probe-unknown-session"})
			if res["reconnected"] != false {
				t.Fatalf("connect naming an unknown session: %v", res)
			}
		} else {
			res = ws.connectAgent()
		}
		if i == 0 {
			sid, _ = res["sessionId"].(string)
			token, _ = res["resumeToken"].(string)
		}
		ws.closeAndSettle()
	}

	before := markState(srv)
	for i := range 4 {
		ws := dialProbe(t, srv)
		params := `{"protocolVersion":1,"participantType":"agent"}`
		if i == 3 {
			// An unknown session is refused before the catch-up barrier,
			// which on a follower is a Raft write.
			params = `{"protocolVersion":1,"participantType":"agent","sessionId":"probe-unknown-2"}`
		}
		ws.send(`{"jsonrpc":"2.0","id":"flood","method":"map/connect","params":` + params + `}`)
		got := ws.collectUntilSentinel(1)
		if len(got) != 1 {
			t.Fatalf("want one reply, got %q", got)
		}
		checkError(t, got[0], wantErr{code: 4001, id: `"flood"`, category: "resource"})
		var r struct {
			Error struct {
				Data struct {
					Retryable    bool           `json:"retryable"`
					RetryAfterMs int64          `json:"retryAfterMs"`
					Details      map[string]any `json:"details"`
				} `json:"data"`
			} `json:"error"`
		}
		if err := json.Unmarshal(got[0], &r); err != nil || !r.Error.Data.Retryable || r.Error.Data.RetryAfterMs <= 0 ||
			r.Error.Data.Details["retryAfterMs"] == nil || r.Error.Data.Details["limit"] != "anonymousSessionsPerSecond" {
			t.Fatalf("want a retryable 4001 with retryAfterMs and the limit in details, got %s", got[0])
		}
	}
	checkUnchanged(t, srv, before)

	// A resume is not a new session.
	ws := dialProbe(t, srv)
	res := ws.mustCall("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent",
		"sessionId": sid, "resumeToken": token})
	if res["sessionId"] != sid || res["reconnected"] != true {
		t.Fatalf("resume over the limit: got %v", res)
	}
	ws.closeAndSettle()

	// An authenticated participant is never limited by it.
	key, err := srv.ACLAdmin().CreateToken(context.Background(), &concordv1.AclCreateTokenRequest{
		ParticipantIdPattern: "probe-auth-*", ParticipantTypes: []string{"agent"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		ws := dialProbe(t, srv)
		res := ws.mustCall("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent",
			"participantId": "probe-auth-" + string(rune('a'+i)),
			"auth":          map[string]any{"method": "api-key", "token": key.GetToken()}})
		if id, ok := res["sessionId"].(string); ok {
			ws.sessions = append(ws.sessions, id)
		}
	}
}
