package rpc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// authHandler is a testHandler whose "auth" method marks the connection
// authenticated, as map/connect does.
func authHandler() *testHandler {
	h := newTestHandler()
	h.onHandle = func(_ context.Context, c *Conn, req *Request) (any, error, bool) {
		if req.Method == "auth" {
			c.Authenticated()
			return map[string]any{"ok": true}, nil, true
		}
		return nil, nil, false
	}
	return h
}

func TestPreAuthGate(t *testing.T) {
	g := newPreAuthGate(3, 2)
	steps := []struct {
		ip   string
		want int // 0 = accepted, else the refusal status
	}{
		{"a", 0}, {"a", 0}, {"a", http.StatusTooManyRequests}, // a holds its share
		{"b", 0}, {"c", http.StatusServiceUnavailable}, // node full
	}
	for i, st := range steps {
		status, ok := g.acquire(st.ip)
		if ok != (st.want == 0) || (!ok && status != st.want) {
			t.Fatalf("step %d (%s): ok=%v status=%d, want %d", i, st.ip, ok, status, st.want)
		}
	}
	g.release("a")
	if _, ok := g.acquire("c"); !ok {
		t.Fatal("a released slot was not reusable by another IP")
	}
	for _, ip := range []string{"a", "b", "c"} {
		g.release(ip)
	}
	if n := g.count(); n != 0 || len(g.perIP) != 0 {
		t.Fatalf("after releasing everything: total %d perIP %v", n, g.perIP)
	}
}

// TestPreAuth_WebSocketTimeout: a WebSocket that never authenticates is
// closed with 1008 after PreAuthTimeout; one that does stays open.
func TestPreAuth_WebSocketTimeout(t *testing.T) {
	cfg := testConfig(t)
	// The authenticated connection has this long to dial and authenticate
	// (200 ms was within reach of a loaded machine).
	cfg.PreAuthTimeout = time.Second
	srv, url := startServer(t, cfg, authHandler())

	authed := dialClient(t, url, nil)
	if _, err := authed.Call(context.Background(), "auth", nil); err != nil {
		t.Fatal(err)
	}
	idle := rawDial(t, url) // dialed after authed: its timeout ends later
	_ = idle.SetReadDeadline(time.Now().Add(testTimeout))
	_, _, err := idle.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != closePolicy {
		t.Fatalf("idle socket: %v, want close 1008", err)
	}
	time.Sleep(cfg.PreAuthTimeout / 2) // authed's own timeout passed before idle's: nothing may close it
	if _, err := authed.Call(context.Background(), "echo", nil); err != nil {
		t.Fatalf("authenticated connection was closed: %v", err)
	}
	eventually(t, testTimeout, func() error {
		if n := srv.pre.count(); n != 0 {
			return fmt.Errorf("%d pre-auth slots held", n)
		}
		return nil
	})
}

// TestPreAuth_WebSocketLoad opens many sockets that never authenticate
// from one IP (bounded: 300 attempts, a few seconds): past the per-IP cap
// they are refused with 429 before any goroutine is spent on them, and
// every slot drains once the timeout passes.
func TestPreAuth_WebSocketLoad(t *testing.T) {
	cfg := testConfig(t)
	cfg.Logger = nil
	cfg.PreAuthTimeout = 2 * time.Second // longer than the dialling takes
	cfg.MaxPreAuthConnsPerIP = 20
	srv, url := startServer(t, cfg, authHandler())
	before := runtime.NumGoroutine()

	var open []*websocket.Conn
	refused := 0
	for range 300 {
		ws, resp, err := websocket.DefaultDialer.Dial(url, nil)
		if err != nil {
			if resp == nil || resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("dial: %v (resp %v), want 429", err, resp)
			}
			refused++
			continue
		}
		open = append(open, ws)
	}
	defer func() {
		for _, ws := range open {
			_ = ws.Close()
		}
	}()
	if len(open) != cfg.MaxPreAuthConnsPerIP || refused != 300-cfg.MaxPreAuthConnsPerIP {
		t.Fatalf("open %d refused %d, want %d and %d", len(open), refused, cfg.MaxPreAuthConnsPerIP, 300-cfg.MaxPreAuthConnsPerIP)
	}
	if g := runtime.NumGoroutine() - before; g > 4*cfg.MaxPreAuthConnsPerIP+10 {
		t.Fatalf("%d goroutines for %d open sockets", g, len(open))
	}
	eventually(t, testTimeout, func() error {
		if n := srv.NumConns(); n != 0 {
			return fmt.Errorf("%d connections still open", n)
		}
		if n := srv.pre.count(); n != 0 {
			return fmt.Errorf("%d pre-auth slots held", n)
		}
		return nil
	})
	// Slots are free again: a new client gets in and authenticates.
	c := dialClient(t, url, nil)
	if _, err := c.Call(context.Background(), "auth", nil); err != nil {
		t.Fatal(err)
	}
}

// TestPreAuth_SSESessionFlood: session-opening POSTs from one IP stop at
// its share (429) instead of filling MaxSessions, expire after the
// pre-auth timeout, and an authenticated session is not affected.
func TestPreAuth_SSESessionFlood(t *testing.T) {
	cfg := testConfig(t)
	cfg.Logger = nil
	cfg.PreAuthTimeout = 3 * time.Second // longer than the flood takes
	cfg.MaxPreAuthConnsPerIP = 10
	e := startSSE(t, cfg, testSSEConfig(), authHandler())

	authed := e.post(t, "/map/rpc", "", `{"jsonrpc":"2.0","id":1,"method":"auth"}`)
	if authed.status != http.StatusOK {
		t.Fatalf("auth POST: %d %s", authed.status, authed.body)
	}
	statuses := map[int]int{}
	for range 60 {
		r := e.post(t, "/map/rpc", "", `{"jsonrpc":"2.0","id":1,"method":"echo"}`)
		statuses[r.status]++
	}
	if statuses[http.StatusOK] != cfg.MaxPreAuthConnsPerIP || statuses[http.StatusTooManyRequests] != 60-cfg.MaxPreAuthConnsPerIP {
		t.Fatalf("statuses %v, want %d x 200 and the rest 429", statuses, cfg.MaxPreAuthConnsPerIP)
	}
	eventually(t, testTimeout, func() error {
		if n := e.sse.numSessions(); n != 1 {
			return fmt.Errorf("%d sessions, want only the authenticated one", n)
		}
		return nil
	})
	if r := e.post(t, "/map/rpc", authed.session, `{"jsonrpc":"2.0","id":2,"method":"echo"}`); r.status != http.StatusOK {
		t.Fatalf("authenticated session after the flood: %d %s", r.status, r.body)
	}
}
