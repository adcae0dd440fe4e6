package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/goleak"

	"github.com/concordmap/concord/node/internal/testlog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds every wait in these tests.
const testTimeout = 10 * time.Second

// testHandler implements a few methods used across the tests.
type testHandler struct {
	mu       sync.Mutex
	notes    []string   // methods of notifications received
	conns    chan *Conn // every connection, on its first message
	closed   chan *Conn // Closed callbacks
	seen     map[*Conn]bool
	callErr  error // what Call returned inside "callme"
	onHandle func(ctx context.Context, c *Conn, req *Request) (any, error, bool)
}

func newTestHandler() *testHandler {
	return &testHandler{conns: make(chan *Conn, 64), closed: make(chan *Conn, 64), seen: map[*Conn]bool{}}
}

func (h *testHandler) Handle(ctx context.Context, c *Conn, req *Request) (any, error) {
	h.mu.Lock()
	if !h.seen[c] {
		h.seen[c] = true
		h.conns <- c
	}
	if req.IsNotification() {
		h.notes = append(h.notes, req.Method)
	}
	hook := h.onHandle
	h.mu.Unlock()
	if hook != nil {
		if res, err, ok := hook(ctx, c, req); ok {
			return res, err
		}
	}
	switch req.Method {
	case "echo":
		return req.Params, nil
	case "fail":
		return nil, NewError(CodeAgentNotFound, "no such agent").WithDetails(map[string]any{"agentId": "a1"})
	case "plainerr":
		return nil, errors.New("secret internal detail")
	case "boom":
		panic("handler exploded")
	case "bye":
		_ = c.Close("bye requested")
		return map[string]any{"ok": true}, nil
	case "callme":
		_, err := c.Call(ctx, "echo", nil)
		h.mu.Lock()
		h.callErr = err
		h.mu.Unlock()
		return nil, err
	case "note":
		return nil, nil
	}
	return nil, NewError(CodeMethodNotFound, "Method not found: "+req.Method)
}

func (h *testHandler) Closed(c *Conn) { h.closed <- c }

func (h *testHandler) notifications() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.notes...)
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func testConfig(t *testing.T) Config {
	cfg := DefaultConfig()
	cfg.Logger = testLogger(t)
	cfg.CloseGracePeriod = 200 * time.Millisecond
	return cfg
}

// startServer runs s behind httptest on 127.0.0.1:0 and returns the ws URL.
// Cleanup shuts both down.
func startServer(t *testing.T, cfg Config, h Handler) (*Server, string) {
	t.Helper()
	s, err := NewServer(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	return s, serveTest(t, s, s)
}

// serveTest runs hs (s, or a handler in front of it) behind httptest on
// 127.0.0.1:0 and returns the ws URL. Cleanup shuts s and the listener
// down.
func serveTest(t *testing.T, s *Server, h http.Handler) string {
	t.Helper()
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		hs.Close()
	})
	return "ws" + strings.TrimPrefix(hs.URL, "http") + "/map"
}

// rawDial opens a plain gorilla client, for sending arbitrary frames.
func rawDial(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return ws
}

// roundTrip sends one text frame and returns the next frame received.
func roundTrip(t *testing.T, ws *websocket.Conn, frame string) []byte {
	t.Helper()
	if err := ws.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
		t.Fatal(err)
	}
	return readFrame(t, ws)
}

func readFrame(t *testing.T, ws *websocket.Conn) []byte {
	t.Helper()
	_ = ws.SetReadDeadline(time.Now().Add(testTimeout))
	_, data, err := ws.ReadMessage()
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return data
}

// wireResp is a decoded response for assertions.
type wireResp struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *Error          `json:"error"`
}

func decodeResp(t *testing.T, data []byte) wireResp {
	t.Helper()
	var r wireResp
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("response %q: %v", data, err)
	}
	if r.JSONRPC != "2.0" {
		t.Fatalf("response %q: jsonrpc %q", data, r.JSONRPC)
	}
	return r
}

// dialClient dials with the package's own client and closes it at cleanup.
func dialClient(t *testing.T, url string, h Handler) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cfg := DefaultClientConfig()
	cfg.Logger = testLogger(t)
	cfg.CloseGracePeriod = 200 * time.Millisecond
	c, err := Dial(ctx, url, cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeAndWait(t, c) })
	return c
}

func closeAndWait(t *testing.T, c *Conn) {
	t.Helper()
	_ = c.Close("test done")
	select {
	case <-c.Done():
	case <-time.After(testTimeout):
		t.Errorf("connection %s did not finish", c.ID())
	}
}

// eventually polls cond until it returns nil or the timeout passes.
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
		time.Sleep(10 * time.Millisecond)
	}
}

func recvConn(t *testing.T, ch <-chan *Conn) *Conn {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(testTimeout):
		t.Fatal("no connection")
		return nil
	}
}

var _ = fmt.Sprintf

func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: testTimeout}
}
