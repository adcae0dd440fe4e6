package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func wsURL(base string) string { return "ws" + strings.TrimPrefix(base, "http") + "/map" }

// Every answer the POST path gives to a single message is the byte-exact
// answer the WebSocket path gives to the same frame; only the HTTP status
// tells success (200), no reply (202) and a refused body (400) apart.
func TestSSE_PostMatchesWebSocket(t *testing.T) {
	env := startSSE(t, testConfig(t), testSSEConfig(), newTestHandler())
	sid := env.connect(t)
	ws := rawDial(t, wsURL(env.base))
	tests := []struct {
		name   string
		path   string
		body   string
		status int
		code   int // expected error code, 0 for a result
	}{
		{"request", "/map/rpc", `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":[1,"x"]}}`, 200, 0},
		{"handler error", "/map/rpc", `{"jsonrpc":"2.0","id":"f","method":"fail"}`, 200, CodeAgentNotFound},
		{"unknown method", "/map/rpc", `{"jsonrpc":"2.0","id":2,"method":"nope"}`, 200, CodeMethodNotFound},
		{"parse error", "/map/rpc", `{"jsonrpc":"2.0","id":3,`, 400, CodeParseError},
		{"invalid utf-8", "/map/rpc", "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"e\xffcho\"}", 400, CodeParseError},
		{"invalid request echoes id", "/map/rpc", `{"jsonrpc":"1.0","id":7,"method":"echo"}`, 400, CodeInvalidRequest},
		{"params by position", "/map/rpc", `{"jsonrpc":"2.0","id":8,"method":"echo","params":[1]}`, 400, CodeInvalidParams},
		{"empty batch", "/map/batch", `[]`, 400, CodeInvalidRequest},
		{"batch", "/map/batch", `[{"jsonrpc":"2.0","id":1,"method":"echo","params":{"n":1}},{"jsonrpc":"2.0","method":"note"},{"jsonrpc":"1.0","id":2,"method":"echo"},{"jsonrpc":"2.0","id":3,"method":"fail"},42]`, 200, 0},
		{"broken batch", "/map/batch", `[{"jsonrpc":"2.0","id":1,"method":"echo"},`, 400, CodeParseError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := env.post(t, tt.path, sid, tt.body)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d (body %s)", r.status, tt.status, r.body)
			}
			want := roundTrip(t, ws, tt.body)
			if string(r.body) != string(want) {
				t.Fatalf("POST answer differs from WebSocket:\n http %s\n ws   %s", r.body, want)
			}
			if tt.path == "/map/rpc" {
				resp := decodeResp(t, r.body)
				if (resp.Error == nil) != (tt.code == 0) || (resp.Error != nil && resp.Error.Code != tt.code) {
					t.Fatalf("answer %s, want code %d", r.body, tt.code)
				}
			}
		})
	}
}

func TestSSE_PostShapes(t *testing.T) {
	env := startSSE(t, testConfig(t), testSSEConfig(), newTestHandler())
	sid := env.connect(t)
	tests := []struct {
		name   string
		path   string
		body   string
		status int
		want   string // compact body, "" for none
	}{
		{"notification", "/map/rpc", `{"jsonrpc":"2.0","method":"note"}`, 202, ""},
		{"notifications only batch", "/map/batch", `[{"jsonrpc":"2.0","method":"note"},{"jsonrpc":"2.0","method":"note"}]`, 202, ""},
		{"response to nothing", "/map/rpc", `{"jsonrpc":"2.0","id":99,"result":{}}`, 202, ""},
		{"array at /map/rpc", "/map/rpc", `[{"jsonrpc":"2.0","id":1,"method":"echo"}]`, 400,
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request","data":{"category":"protocol","retryable":false,"details":{"reason":"a JSON array must be POSTed to /map/batch"}}}}`},
		{"object at /map/batch", "/map/batch", `{"jsonrpc":"2.0","id":1,"method":"echo"}`, 400,
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request","data":{"category":"protocol","retryable":false,"details":{"reason":"POST /map/batch takes a JSON array"}}}}`},
		{"duplicate id in batch", "/map/batch", `[{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}},{"jsonrpc":"2.0","id":1,"method":"echo"}]`, 200,
			`[{"jsonrpc":"2.0","id":1,"result":{"a":1}},{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"Invalid Request","data":{"category":"protocol","retryable":false,"details":{"reason":"duplicate request id in batch"}}}}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := env.post(t, tt.path, sid, tt.body)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d (body %s)", r.status, tt.status, r.body)
			}
			if tt.want == "" {
				if len(r.body) != 0 {
					t.Fatalf("body %q, want none", r.body)
				}
				return
			}
			if got := compactJSON(t, r.body); got != tt.want {
				t.Fatalf("body\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestSSE_UnknownSession(t *testing.T) {
	env := startSSE(t, testConfig(t), testSSEConfig(), newTestHandler())
	for _, path := range []string{"/map/rpc", "/map/batch"} {
		r := env.post(t, path, "bogus", `{"jsonrpc":"2.0","id":1,"method":"echo"}`)
		if r.status != http.StatusNotFound {
			t.Fatalf("%s: status %d, want 404", path, r.status)
		}
		if e := decodeResp(t, r.body).Error; e == nil || e.Code != CodeInvalidRequest || e.Message != "Unknown or expired HTTP session" {
			t.Fatalf("%s: body %s", path, r.body)
		}
	}
	sc := env.stream(t, "bogus", nil)
	if sc.status != http.StatusNotFound {
		t.Fatalf("GET: status %d, want 404", sc.status)
	}
	if ev := sc.next(t); ev.name != "body" || !strings.Contains(ev.data, "Unknown or expired HTTP session") {
		t.Fatalf("GET body %v", ev)
	}
	if n := env.sse.numSessions(); n != 0 {
		t.Fatalf("%d sessions created by refused requests", n)
	}
}

func TestSSE_OversizedBody(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxFrameBytes = 1024
	env := startSSE(t, cfg, testSSEConfig(), newTestHandler())
	sid := env.connect(t)
	big := `{"jsonrpc":"2.0","id":9,"method":"echo","params":{"pad":"` + strings.Repeat("x", 4000) + `"}}`
	r := env.post(t, "/map/rpc", sid, big)
	if r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", r.status)
	}
	want := roundTrip(t, rawDial(t, wsURL(env.base)), big)
	if string(r.body) != string(want) {
		t.Fatalf("413 body differs from WebSocket:\n http %s\n ws   %s", r.body, want)
	}
	resp := decodeResp(t, r.body)
	if string(resp.ID) != "9" || resp.Error.Code != CodeInvalidRequest || resp.Error.Data.Details["limit"] != float64(1024) {
		t.Fatalf("413 body %s", r.body)
	}
	if r := env.post(t, "/map/rpc", sid, `{"jsonrpc":"2.0","id":10,"method":"echo","params":{}}`); r.status != 200 {
		t.Fatalf("session unusable after an oversized body: %d %s", r.status, r.body)
	}
}

// push makes the handler notify its connection n times before answering.
func pushHook(ctx context.Context, c *Conn, req *Request) (any, error, bool) {
	if req.Method != "push" {
		return nil, nil, false
	}
	var p struct{ N, From int }
	_ = json.Unmarshal(req.Params, &p)
	for i := range p.N {
		if err := c.Notify("map/event", map[string]any{"n": p.From + i}); err != nil {
			return nil, err, true
		}
	}
	return map[string]any{"pushed": p.N}, nil, true
}

func pushBody(id, n, from int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"push","params":{"n":%d,"from":%d}}`, id, n, from)
}

func wantEvent(t *testing.T, ev sseEvt, id string, n int) {
	t.Helper()
	want := fmt.Sprintf(`{"jsonrpc":"2.0","method":"map/event","params":{"n":%d}}`, n)
	if ev.id != id || ev.name != "map.event" || ev.data != want {
		t.Fatalf("event %+v, want id %s data %s", ev, id, want)
	}
}

// Notifications wait in the session until a stream attaches, then stream
// live; the POST still gets its own response.
func TestSSE_NotificationsOnStream(t *testing.T) {
	h := newTestHandler()
	h.onHandle = pushHook
	env := startSSE(t, testConfig(t), testSSEConfig(), h)
	r := env.post(t, "/map/rpc", "", pushBody(1, 3, 0))
	if r.status != 200 || compactJSON(t, r.body) != `{"jsonrpc":"2.0","id":1,"result":{"pushed":3}}` {
		t.Fatalf("push: %d %s", r.status, r.body)
	}
	sc := env.stream(t, r.session, nil)
	if sc.status != 200 || sc.session != r.session {
		t.Fatalf("GET: status %d session %q", sc.status, sc.session)
	}
	for i := range 3 {
		wantEvent(t, sc.next(t), fmt.Sprint(i+1), i)
	}
	if r := env.post(t, "/map/rpc", r.session, pushBody(2, 2, 3)); r.status != 200 {
		t.Fatalf("second push: %d %s", r.status, r.body)
	}
	wantEvent(t, sc.next(t), "4", 3)
	wantEvent(t, sc.next(t), "5", 4)
}

// A stream opened without a session creates one and names it in its first
// event, for EventSource clients that cannot read headers.
func TestSSE_StreamCreatesSession(t *testing.T) {
	h := newTestHandler()
	h.onHandle = pushHook
	env := startSSE(t, testConfig(t), testSSEConfig(), h)
	sc := env.stream(t, "", nil)
	ev := sc.next(t)
	if ev.name != "map.session" || ev.data != `{"session":"`+sc.session+`"}` || sc.session == "" {
		t.Fatalf("first event %+v, header session %q", ev, sc.session)
	}
	if r := env.post(t, "/map/rpc", sc.session, pushBody(1, 1, 7)); r.status != 200 {
		t.Fatalf("push: %d %s", r.status, r.body)
	}
	wantEvent(t, sc.next(t), "1", 7)
}

// A second stream replaces the first; Last-Event-ID replays what is still
// buffered, and what was dropped is reported as a gap.
func TestSSE_StreamReplaceResumeAndGap(t *testing.T) {
	h := newTestHandler()
	h.onHandle = pushHook
	scfg := testSSEConfig()
	scfg.BufferEvents = 4
	env := startSSE(t, testConfig(t), scfg, h)
	sid := env.connect(t)
	env.post(t, "/map/rpc", sid, pushBody(1, 3, 0))
	a := env.stream(t, sid, nil)
	for i := range 3 {
		wantEvent(t, a.next(t), fmt.Sprint(i+1), i)
	}
	b := env.stream(t, sid, map[string]string{"Last-Event-ID": "1"})
	if rest := a.expectEnd(t); len(rest) != 0 {
		t.Fatalf("replaced stream got %v", rest)
	}
	wantEvent(t, b.next(t), "2", 1)
	wantEvent(t, b.next(t), "3", 2)
	b.cancel()
	b.expectEnd(t)

	// Six more events while no stream is attached: 4..9; only 6..9 fit.
	env.post(t, "/map/rpc", sid, pushBody(2, 6, 3))
	c := env.stream(t, sid, map[string]string{"Last-Event-ID": "3"})
	if ev := c.next(t); ev.name != "map.gap" || ev.data != `{"from":4,"to":5}` {
		t.Fatalf("want gap 4..5, got %+v", ev)
	}
	for seq := 6; seq <= 9; seq++ {
		wantEvent(t, c.next(t), fmt.Sprint(seq), seq-1)
	}
}

// The server can call into an HTTP client: the request arrives on the
// stream and the client POSTs the response.
func TestSSE_ServerCallsClient(t *testing.T) {
	h := newTestHandler()
	results := make(chan string, 1)
	h.onHandle = func(_ context.Context, c *Conn, req *Request) (any, error, bool) {
		if req.Method != "ask" {
			return nil, nil, false
		}
		go func() { // ends when the call is answered or times out
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			res, err := c.Call(ctx, "whoami", map[string]any{"q": 1})
			results <- fmt.Sprintf("%s %v", res, err)
		}()
		return "asked", nil, true
	}
	env := startSSE(t, testConfig(t), testSSEConfig(), h)
	sid := env.connect(t)
	sc := env.stream(t, sid, nil)
	env.post(t, "/map/rpc", sid, `{"jsonrpc":"2.0","id":1,"method":"ask"}`)
	ev := sc.next(t)
	var call struct {
		ID     json.RawMessage
		Method string
	}
	if err := json.Unmarshal([]byte(ev.data), &call); err != nil || call.Method != "whoami" {
		t.Fatalf("stream event %+v (%v)", ev, err)
	}
	r := env.post(t, "/map/rpc", sid, `{"jsonrpc":"2.0","id":`+string(call.ID)+`,"result":{"me":"http"}}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("response POST: %d %s", r.status, r.body)
	}
	select {
	case got := <-results:
		if got != `{"me":"http"} <nil>` {
			t.Fatalf("call result %s", got)
		}
	case <-time.After(testTimeout):
		t.Fatal("call never answered")
	}
}

// A POST that times out answers 504 naming the pending ids; the response
// arrives on the stream when the handler finishes.
func TestSSE_TimeoutDeliversOnStream(t *testing.T) {
	h := newTestHandler()
	release := make(chan struct{})
	h.onHandle = func(ctx context.Context, _ *Conn, req *Request) (any, error, bool) {
		if req.Method != "slow" {
			return nil, nil, false
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "late", nil, true
	}
	scfg := testSSEConfig()
	scfg.RequestTimeout = 200 * time.Millisecond
	env := startSSE(t, testConfig(t), scfg, h)
	sid := env.connect(t)
	sc := env.stream(t, sid, nil)
	r := env.post(t, "/map/rpc", sid, `{"jsonrpc":"2.0","id":5,"method":"slow"}`)
	if r.status != http.StatusGatewayTimeout {
		t.Fatalf("status %d, want 504 (%s)", r.status, r.body)
	}
	if e := decodeResp(t, r.body).Error; e == nil || fmt.Sprint(e.Data.Details["pendingIds"]) != "[5]" {
		t.Fatalf("504 body %s", r.body)
	}
	close(release)
	if ev := sc.next(t); ev.data != `{"jsonrpc":"2.0","id":5,"result":"late"}` {
		t.Fatalf("late response on stream: %+v", ev)
	}
}

func TestSSEConfig_Validate(t *testing.T) {
	if err := DefaultSSEConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*SSEConfig){
		"idle":      func(c *SSEConfig) { c.IdleTimeout = 0 },
		"request":   func(c *SSEConfig) { c.RequestTimeout = 0 },
		"heartbeat": func(c *SSEConfig) { c.HeartbeatInterval = 0 },
		"sessions":  func(c *SSEConfig) { c.MaxSessions = 0 },
		"events":    func(c *SSEConfig) { c.BufferEvents = 0 },
		"bytes":     func(c *SSEConfig) { c.BufferBytes = 0 },
	} {
		c := DefaultSSEConfig()
		edit(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: err %v", name, err)
		}
	}
}
