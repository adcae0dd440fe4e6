package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/rpc"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
	"github.com/concordmap/concord/raftstore/testlog"
)

// TestMain fails the run if goroutines outlive the tests. Tests here run
// gossip clusters (the last one among them), and memberlist's Shutdown
// does not wait for its probe goroutine, which may finish its current
// round (a probe timeout, then fallback TCP pings: about a second under
// load) afterwards; goleak's own retries give up after about half a
// second. So the check is retried for up to leakGrace, as
// node/membership's TestMain does; a goroutine that never exits still
// fails the run.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		const leakGrace = 20 * time.Second
		for deadline := time.Now().Add(leakGrace); ; {
			err := goleak.Find()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "goleak: goroutines left %v after the tests: %v\n", leakGrace, err)
				code = 1
				break
			}
			time.Sleep(100 * time.Millisecond) // polling for goroutines to exit; there is no event to wait on
		}
	}
	os.Exit(code)
}

// startNode starts a dev node keeping its data in dir and stops it at cleanup.
func startNode(t *testing.T, dir string) *node.Server {
	t.Helper()
	cfg := node.DevConfig(dir)
	secure(&cfg)
	return startConfig(t, cfg)
}

// startConfig starts a node with cfg (logs to the test output when
// cfg.Logger is nil) and stops it at cleanup.
func startConfig(t *testing.T, cfg node.Config) *node.Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	srv, err := node.New(cfg)
	if err != nil {
		t.Fatalf("new node: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		_ = srv.Shutdown(context.Background())
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv
}

// client is a minimal MAP client over the real WebSocket endpoint.
type client struct {
	t    *testing.T
	conn *rpc.Conn
}

func dial(t *testing.T, srv *node.Server) *client {
	t.Helper()
	return dialWith(t, srv, nil)
}

// dialWith connects with h serving what the node sends (nil: dropped).
func dialWith(t *testing.T, srv *node.Server, h rpc.Handler) *client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cc := rpc.DefaultClientConfig()
	cc.TLSConfig = tlstest.ClientTLS("dev", "")
	conn, err := rpc.Dial(ctx, srv.MAPURL(), cc, h)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close("test done"); <-conn.Done() })
	return &client{t: t, conn: conn}
}

func (c *client) call(method string, params any) map[string]any {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	raw, err := c.conn.Call(ctx, method, params)
	if err != nil {
		var re *rpc.Error
		if errors.As(err, &re) && re.Data != nil {
			c.t.Fatalf("%s: %v (details %v)", method, err, re.Data.Details)
		}
		c.t.Fatalf("%s: %v", method, err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		c.t.Fatalf("%s: decode result %s: %v", method, raw, err)
	}
	return out
}

// TestServer_RestartKeepsState kills a node (graceful shutdown, same data
// dir) and checks every agent, scope and session comes back.
func TestServer_RestartKeepsState(t *testing.T) {
	dir := t.TempDir()
	srv := startNode(t, dir)
	c := dial(t, srv)
	conn := c.call("map/connect", map[string]any{
		"protocolVersion": 1, "participantType": "agent", "name": "keeper",
		"disconnectPolicy": map[string]any{"agentBehavior": "orphan"},
	})
	sessionID, _ := conn["sessionId"].(string)
	token, _ := conn["resumeToken"].(string)
	if sessionID == "" || token == "" {
		t.Fatalf("connect result lacks sessionId/resumeToken: %v", conn)
	}
	c.call("map/agents/register", map[string]any{"agentId": "keeper-1", "role": "tester"})
	c.call("map/scopes/create", map[string]any{"scopeId": "room", "name": "Room"})
	c.call("map/scopes/join", map[string]any{"scopeId": "room", "agentId": "keeper-1"})
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	srv2 := startNode(t, dir)
	c2 := dial(t, srv2)
	res := c2.call("map/connect", map[string]any{
		"protocolVersion": 1, "participantType": "agent", "sessionId": sessionID, "resumeToken": token,
	})
	if res["reconnected"] != true || res["sessionId"] != sessionID {
		t.Fatalf("resume after restart: want reconnected session %s, got %v", sessionID, res)
	}
	agent := c2.call("map/agents/get", map[string]any{"agentId": "keeper-1"})["agent"].(map[string]any)
	if agent["role"] != "tester" {
		t.Fatalf("agent after restart: %v", agent)
	}
	members := c2.call("map/scopes/members", map[string]any{"scopeId": "room"})["members"].([]any)
	if len(members) != 1 || members[0] != "keeper-1" {
		t.Fatalf("scope members after restart: %v", members)
	}
}

// TestServer_HTTPEndpoints checks health, readiness and metrics over
// https, as an operator.
func TestServer_HTTPEndpoints(t *testing.T) {
	srv := startNode(t, t.TempDir())
	c := dial(t, srv)
	c.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "client"})
	c.call("map/agents/list", nil)
	op := httpsClient("dev", "alice")
	for _, tc := range []struct {
		path, want string
	}{
		{"/v1/health", `"status":"ok"`},
		{"/v1/ready", `"ready":true`},
		{"/v1/status", `"leaderId":"dev-1"`},
		{"/metrics", `concord_rpc_requests_total{code="0",method="map/agents/list"} 1`},
		{"/metrics", `concord_raft_state{node_id="dev-1",state="Leader"} 1`},
		{"/metrics", `concord_connections{transport="websocket"} 1`},
		{"/metrics", `concord_raft_apply_duration_seconds_count{command="COMMAND_TYPE_SESSION_OPEN"}`},
	} {
		resp, err := op.Get(srv.HTTPURL() + tc.path)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), tc.want) {
			t.Errorf("GET %s: status %d, want body containing %q, got:\n%.2000s", tc.path, resp.StatusCode, tc.want, body)
		}
	}
}

// /debug/pprof is served only with EnableDebug (to an operator); nothing
// under /debug/ answers otherwise, even an operator.
func TestServer_DebugOnlyWhenEnabled(t *testing.T) {
	op := httpsClient("dev", "alice")
	for _, enabled := range []bool{false, true} {
		t.Run(fmt.Sprintf("enabled=%v", enabled), func(t *testing.T) {
			cfg := node.DevConfig(t.TempDir())
			secure(&cfg)
			cfg.EnableDebug = enabled
			srv := startConfig(t, cfg)
			for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1", "/debug/vars"} {
				resp, err := op.Get(srv.HTTPURL() + path)
				if err != nil {
					t.Fatalf("GET %s: %v", path, err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := http.StatusNotFound
				if enabled && path != "/debug/vars" {
					want = http.StatusOK
				}
				if resp.StatusCode != want {
					t.Errorf("GET %s: %d, want %d (%.200s)", path, resp.StatusCode, want, body)
				}
			}
		})
	}
}
