package rpc

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
)

// deferHandler defers every "slow" request and answers it when the test
// releases it; "fast" is answered at once. "slowpanic" defers and then
// panics.
type deferHandler struct {
	mu       sync.Mutex
	pending  map[string]*Deferred // by the request's params (a name)
	deferred chan string          // names deferred, in order
	refused  chan string          // names whose Defer was refused
}

func newDeferHandler() *deferHandler {
	return &deferHandler{pending: map[string]*Deferred{}, deferred: make(chan string, 64), refused: make(chan string, 64)}
}

func (h *deferHandler) Handle(ctx context.Context, c *Conn, req *Request) (any, error) {
	var p struct{ N string }
	_ = json.Unmarshal(req.Params, &p)
	name := p.N
	switch req.Method {
	case "fast":
		return "fast:" + name, nil
	case "bye":
		_ = c.Close("bye requested")
		return "bye", nil
	case "slow", "slowpanic":
		d, ok := Defer(ctx)
		if !ok {
			h.refused <- name
			return "sync:" + name, nil
		}
		h.mu.Lock()
		h.pending[name] = d
		h.mu.Unlock()
		h.deferred <- name
		if req.Method == "slowpanic" {
			panic("after defer")
		}
		return "ignored", nil
	}
	return nil, NewError(CodeMethodNotFound, req.Method)
}

func (h *deferHandler) Closed(*Conn) {}

func (h *deferHandler) release(t *testing.T, name string, result any, err error) {
	t.Helper()
	h.mu.Lock()
	d := h.pending[name]
	h.mu.Unlock()
	if d == nil {
		t.Fatalf("no deferred request %q", name)
	}
	d.Reply(result, err)
}

func waitName(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(testTimeout):
		t.Fatal("timed out")
		return ""
	}
}

func send(t *testing.T, ws interface{ WriteMessage(int, []byte) error }, frame string) {
	t.Helper()
	if err := ws.WriteMessage(1, []byte(frame)); err != nil {
		t.Fatal(err)
	}
}

// TestDefer_ReaderMovesOn: a deferred request does not hold up the next
// one, and its reply goes out when the handler replies.
func TestDefer_ReaderMovesOn(t *testing.T) {
	h := newDeferHandler()
	_, url := startServer(t, testConfig(t), h)
	ws := rawDial(t, url)
	send(t, ws, `{"jsonrpc":"2.0","id":1,"method":"slow","params":{"n":"a"}}`)
	waitName(t, h.deferred)
	if got := decodeResp(t, roundTrip(t, ws, `{"jsonrpc":"2.0","id":2,"method":"fast","params":{"n":"b"}}`)); string(got.ID) != "2" {
		t.Fatalf("first reply is for id %s, want 2 (the deferred request held the reader)", got.ID)
	}
	h.release(t, "a", "done:a", nil)
	got := decodeResp(t, readFrame(t, ws))
	if string(got.ID) != "1" || string(got.Result) != `"done:a"` {
		t.Fatalf("deferred reply: id %s result %s", got.ID, got.Result)
	}
	h.release(t, "a", "again", nil) // ignored: replied already
	if got := decodeResp(t, roundTrip(t, ws, `{"jsonrpc":"2.0","id":3,"method":"fast","params":{"n":"c"}}`)); string(got.ID) != "3" {
		t.Fatalf("a second Reply sent something: reply for id %s", got.ID)
	}
}

func TestDefer_ErrorsMappedLikeHandlerErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		wantCode int
	}{
		{"mapErr", NewError(CodeDeliveryFailed, "nope"), CodeDeliveryFailed},
		{"plain", context.DeadlineExceeded, CodeInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newDeferHandler()
			_, url := startServer(t, testConfig(t), h)
			ws := rawDial(t, url)
			send(t, ws, `{"jsonrpc":"2.0","id":7,"method":"slow","params":{"n":"x"}}`)
			waitName(t, h.deferred)
			h.release(t, "x", "ignored", tc.err)
			got := decodeResp(t, readFrame(t, ws))
			if got.Error == nil || got.Error.Code != tc.wantCode || got.Result != nil {
				t.Fatalf("reply %+v, want error code %d and no result", got, tc.wantCode)
			}
		})
	}
}

// TestDefer_RefusedInBatch: a batch's replies are one frame, so its
// elements are answered synchronously.
func TestDefer_RefusedInBatch(t *testing.T) {
	h := newDeferHandler()
	_, url := startServer(t, testConfig(t), h)
	ws := rawDial(t, url)
	got := string(roundTrip(t, ws, `[{"jsonrpc":"2.0","id":1,"method":"slow","params":{"n":"a"}},{"jsonrpc":"2.0","id":2,"method":"fast","params":{"n":"b"}}]`))
	if !strings.Contains(got, `"sync:a"`) || !strings.Contains(got, `"fast:b"`) {
		t.Fatalf("batch reply %s", got)
	}
	if name := waitName(t, h.refused); name != "a" {
		t.Fatalf("refused %q", name)
	}
}

// TestDefer_BoundBackpressures: with MaxDeferred outstanding, the reader
// waits before serving the next request until one is answered.
func TestDefer_BoundBackpressures(t *testing.T) {
	h := newDeferHandler()
	cfg := testConfig(t)
	cfg.MaxDeferred = 2
	_, url := startServer(t, cfg, h)
	ws := rawDial(t, url)
	send(t, ws, `{"jsonrpc":"2.0","id":1,"method":"slow","params":{"n":"a"}}`)
	send(t, ws, `{"jsonrpc":"2.0","id":2,"method":"slow","params":{"n":"b"}}`)
	send(t, ws, `{"jsonrpc":"2.0","id":3,"method":"slow","params":{"n":"c"}}`)
	waitName(t, h.deferred)
	waitName(t, h.deferred)
	select {
	case name := <-h.deferred:
		t.Fatalf("third request %q deferred beyond MaxDeferred=2", name)
	case <-time.After(100 * time.Millisecond): // absence check: c must wait
	}
	h.release(t, "a", "done:a", nil)
	if name := waitName(t, h.deferred); name != "c" {
		t.Fatalf("deferred %q after a slot freed, want c", name)
	}
	if got := decodeResp(t, readFrame(t, ws)); string(got.ID) != "1" {
		t.Fatalf("reply for id %s, want 1", got.ID)
	}
	h.release(t, "b", "done:b", nil)
	h.release(t, "c", "done:c", nil)
	for _, want := range []string{"2", "3"} {
		if got := decodeResp(t, readFrame(t, ws)); string(got.ID) != want {
			t.Fatalf("reply for id %s, want %s", got.ID, want)
		}
	}
}

// TestDefer_DisabledAnswersSynchronously: MaxDeferred 0 turns Defer off.
func TestDefer_DisabledAnswersSynchronously(t *testing.T) {
	h := newDeferHandler()
	cfg := testConfig(t)
	cfg.MaxDeferred = 0
	_, url := startServer(t, cfg, h)
	ws := rawDial(t, url)
	if got := decodeResp(t, roundTrip(t, ws, `{"jsonrpc":"2.0","id":1,"method":"slow","params":{"n":"a"}}`)); string(got.Result) != `"sync:a"` {
		t.Fatalf("reply %s", got.Result)
	}
}

// TestDefer_CloseWaitsForDeferredReplies: a close asked for while a reply
// is deferred (map/disconnect after pipelined sends) lets that reply out
// first, and serves no request that arrives meanwhile.
func TestDefer_CloseWaitsForDeferredReplies(t *testing.T) {
	h := newDeferHandler()
	_, url := startServer(t, testConfig(t), h)
	ws := rawDial(t, url)
	send(t, ws, `{"jsonrpc":"2.0","id":1,"method":"slow","params":{"n":"a"}}`)
	waitName(t, h.deferred)
	if got := decodeResp(t, roundTrip(t, ws, `{"jsonrpc":"2.0","id":2,"method":"bye"}`)); string(got.ID) != "2" {
		t.Fatalf("reply for id %s, want the bye's", got.ID)
	}
	send(t, ws, `{"jsonrpc":"2.0","id":3,"method":"fast","params":{"n":"late"}}`)
	h.release(t, "a", "done:a", nil)
	if got := decodeResp(t, readFrame(t, ws)); string(got.ID) != "1" || string(got.Result) != `"done:a"` {
		t.Fatalf("after bye: id %s result %s, want the deferred reply", got.ID, got.Result)
	}
	_ = ws.SetReadDeadline(time.Now().Add(testTimeout))
	if _, data, err := ws.ReadMessage(); err == nil {
		t.Fatalf("got %s after the close, want the close frame", data)
	}
}

func TestDefer_PanicAfterDeferAnswers32603(t *testing.T) {
	h := newDeferHandler()
	_, url := startServer(t, testConfig(t), h)
	ws := rawDial(t, url)
	got := decodeResp(t, roundTrip(t, ws, `{"jsonrpc":"2.0","id":9,"method":"slowpanic","params":{"n":"p"}}`))
	if got.Error == nil || got.Error.Code != CodeInternal {
		t.Fatalf("reply %+v, want -32603", got)
	}
	if got := decodeResp(t, roundTrip(t, ws, `{"jsonrpc":"2.0","id":10,"method":"fast","params":{"n":"q"}}`)); string(got.ID) != "10" {
		t.Fatalf("connection unusable after the panic: %+v", got)
	}
}

// TestDefer_ReplyAfterConnectionEnded is dropped quietly.
func TestDefer_ReplyAfterConnectionEnded(t *testing.T) {
	h := newDeferHandler()
	_, url := startServer(t, testConfig(t), h)
	ws := rawDial(t, url)
	send(t, ws, `{"jsonrpc":"2.0","id":1,"method":"slow","params":{"n":"a"}}`)
	waitName(t, h.deferred)
	_ = ws.Close()
	h.mu.Lock()
	d := h.pending["a"]
	h.mu.Unlock()
	eventually(t, testTimeout, func() error {
		select {
		case <-d.c.Done():
			return nil
		default:
			return context.DeadlineExceeded
		}
	})
	d.Reply("late", nil)
}

func TestDefer_OutsideHandlerRefused(t *testing.T) {
	if _, ok := Defer(context.Background()); ok {
		t.Fatal("Defer accepted a context that is not a handler's")
	}
}
