package node_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/internal/testlog"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
)

// testMAPOriginAllowlist (run by TestCluster_Issue12): a browser page from a foreign origin cannot
// open a MAP connection (WebSocket or HTTP+SSE); the node's own origin,
// another member's (console failover) and non-browser clients can.
func testMAPOriginAllowlist(t *testing.T, n1, n2 *node.Server) {
	hc := httpsClient("dev", "")
	dialer := websocket.Dialer{TLSClientConfig: tlstest.ClientTLS("dev", "")}
	eventually(t, 10*time.Second, func() error {
		r, err := hc.Get("https://" + n1.HTTPAddr() + "/v1/members")
		if err != nil {
			return err
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(b), n2.HTTPAddr()) {
			return fmt.Errorf("n1 does not list n2 yet")
		}
		return nil
	})
	for _, tc := range []struct {
		name, origin string
		want         int
	}{
		{"no origin (not a browser)", "", http.StatusSwitchingProtocols},
		{"same host", "https://" + n1.HTTPAddr(), http.StatusSwitchingProtocols},
		{"another member (console failover)", "https://" + n2.HTTPAddr(), http.StatusSwitchingProtocols},
		{"foreign page", "http://evil.example", http.StatusForbidden},
		{"foreign page on another port of the host", "https://127.0.0.1:1", http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.origin != "" {
				h.Set("Origin", tc.origin)
			}
			ws, resp, err := dialer.Dial(n1.MAPURL(), h)
			if ws != nil {
				_ = ws.Close()
			}
			if resp == nil || resp.StatusCode != tc.want {
				t.Fatalf("upgrade: resp %v err %v, want %d", resp, err, tc.want)
			}
			req, _ := http.NewRequest(http.MethodPost, "https://"+n1.HTTPAddr()+"/map/rpc", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"map/agents/list"}`))
			req.Header.Set("Content-Type", "application/json")
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			pr, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			pr.Body.Close()
			if forbidden := pr.StatusCode == http.StatusForbidden; forbidden != (tc.want == http.StatusForbidden) {
				t.Fatalf("HTTP+SSE POST: status %d", pr.StatusCode)
			}
		})
	}
}

// TestHTTP_AllowedOriginsAndIdleTimeout: a configured origin is allowed,
// and an idle keep-alive connection is closed by the server.
func TestHTTP_AllowedOriginsAndIdleTimeout(t *testing.T) {
	cfg := node.DevConfig(t.TempDir())
	cfg.AllowedOrigins = []string{"https://app.example.com"}
	cfg.HTTPIdleTimeout = 200 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })

	ws, resp, err := websocket.DefaultDialer.Dial(srv.MAPURL(), http.Header{"Origin": {"https://app.example.com"}})
	if err != nil {
		t.Fatalf("configured origin refused: %v %v", resp, err)
	}
	_ = ws.Close()

	conn, err := net.Dial("tcp", srv.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/health HTTP/1.1\r\nHost: %s\r\n\r\n", srv.HTTPAddr())
	br := bufio.NewReader(conn)
	r, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle keep-alive connection: read %v, want EOF (closed by the server)", err)
	}
}

// eventually polls cond until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
