package rpc

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestServeHTTP_ServesFirstMessageThenReturns: the upgrading handler serves
// the connection's first message on its own goroutine (whose stack the
// handshake already grew), and returns once the reader hops to a goroutine
// of its own; the connection lives on.
func TestServeHTTP_ServesFirstMessageThenReturns(t *testing.T) {
	h := newTestHandler()
	entered, release := make(chan struct{}), make(chan struct{})
	h.onHandle = func(_ context.Context, _ *Conn, req *Request) (any, error, bool) {
		if req.Method != "hold" {
			return nil, nil, false
		}
		close(entered)
		<-release
		return "held", nil, true
	}
	s, err := NewServer(testConfig(t), h)
	if err != nil {
		t.Fatal(err)
	}
	returned := make(chan struct{}, 1)
	url := serveTest(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.ServeHTTP(w, r)
		returned <- struct{}{}
	}))
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // runs before the Shutdown above if the test fails early
	ws := rawDial(t, url)

	if err := ws.WriteMessage(1, []byte(`{"jsonrpc":"2.0","id":1,"method":"hold"}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(testTimeout):
		t.Fatal("first message not served")
	}
	select {
	case <-returned:
		t.Fatal("ServeHTTP returned before its connection's first message was answered")
	case <-time.After(50 * time.Millisecond):
	}
	unblock()
	if got := decodeResp(t, readFrame(t, ws)); string(got.Result) != `"held"` {
		t.Fatalf("first answer %s", got.Result)
	}
	select {
	case <-returned:
	case <-time.After(testTimeout):
		t.Fatal("ServeHTTP did not return after the first message of an idle connection")
	}
	if got := decodeResp(t, roundTrip(t, ws, `{"jsonrpc":"2.0","id":2,"method":"echo","params":{"n":7}}`)); string(got.Result) != `{"n":7}` {
		t.Fatalf("after the hop: echo answered %s (error %v)", got.Result, got.Error)
	}
}
