package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

func TestSSE_IdleExpiry(t *testing.T) {
	h := newTestHandler()
	scfg := testSSEConfig()
	// The stream below must attach within it after the connect's POST
	// (100 ms was within reach of a loaded machine).
	scfg.IdleTimeout = 500 * time.Millisecond
	env := startSSE(t, testConfig(t), scfg, h)

	// Unused after its POST: closed like a dropped WebSocket.
	sid := env.connect(t)
	select {
	case <-h.closed:
	case <-time.After(testTimeout):
		t.Fatal("idle session never closed")
	}
	if r := env.post(t, "/map/rpc", sid, `{"jsonrpc":"2.0","id":1,"method":"echo"}`); r.status != http.StatusNotFound {
		t.Fatalf("expired session: status %d", r.status)
	}

	// An attached stream keeps it alive; detaching starts the clock.
	sid = env.connect(t)
	sc := env.stream(t, sid, nil)
	if sc.status != http.StatusOK {
		t.Fatalf("stream attach: status %d", sc.status)
	}
	time.Sleep(3 * scfg.IdleTimeout) // let the idle timeout pass several times
	if r := env.post(t, "/map/rpc", sid, `{"jsonrpc":"2.0","id":2,"method":"echo"}`); r.status != http.StatusOK {
		t.Fatalf("session with a stream expired: status %d", r.status)
	}
	sc.cancel()
	select {
	case <-h.closed:
	case <-time.After(testTimeout):
		t.Fatal("session not closed after its stream left")
	}
	eventually(t, testTimeout, func() error {
		if n := env.sse.numSessions(); n != 0 {
			return fmt.Errorf("%d sessions", n)
		}
		return nil
	})
}

// Closing the connection from the handler (map/disconnect does) ends the
// stream with map.close after the reply.
func TestSSE_ServerCloseEndsStream(t *testing.T) {
	env := startSSE(t, testConfig(t), testSSEConfig(), newTestHandler())
	sid := env.connect(t)
	sc := env.stream(t, sid, nil)
	r := env.post(t, "/map/rpc", sid, `{"jsonrpc":"2.0","id":1,"method":"bye"}`)
	if r.status != 200 || compactJSON(t, r.body) != `{"jsonrpc":"2.0","id":1,"result":{"ok":true}}` {
		t.Fatalf("bye: %d %s", r.status, r.body)
	}
	evs := sc.expectEnd(t)
	if len(evs) != 1 || evs[0].name != "map.close" || evs[0].data != `{"code":1000,"reason":"bye requested"}` {
		t.Fatalf("events before end: %+v", evs)
	}
	if r := env.post(t, "/map/rpc", sid, `{"jsonrpc":"2.0","id":2,"method":"echo"}`); r.status != http.StatusNotFound {
		t.Fatalf("closed session: status %d", r.status)
	}
}

func TestSSE_ShutdownEndsSessions(t *testing.T) {
	h := newTestHandler()
	env := startSSE(t, testConfig(t), testSSEConfig(), h)
	sid := env.connect(t)
	sc := env.stream(t, sid, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := env.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	evs := sc.expectEnd(t)
	if len(evs) != 1 || evs[0].data != `{"code":1001,"reason":"server shutting down"}` {
		t.Fatalf("events before end: %+v", evs)
	}
	if n := env.srv.NumConns(); n != 0 {
		t.Fatalf("%d connections after shutdown", n)
	}
	if r := env.post(t, "/map/rpc", "", `{"jsonrpc":"2.0","id":1,"method":"echo"}`); r.status != http.StatusServiceUnavailable {
		t.Fatalf("new session after shutdown: status %d", r.status)
	}
}

// http.Server.Shutdown waits for active requests; the handler ends its
// streams when it starts, so it does not wait for its deadline.
func TestSSE_HTTPServerShutdownEndsStreams(t *testing.T) {
	srv, err := NewServer(testConfig(t), newTestHandler())
	if err != nil {
		t.Fatal(err)
	}
	sh, err := srv.HTTPSSEHandler(testSSEConfig())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := newHTTPServer(sh)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	env := &sseEnv{srv: srv, sse: sh.(*sseHandler), base: "http://" + ln.Addr().String()}
	sid := env.connect(t)
	sc := env.stream(t, sid, nil)
	if r := env.post(t, "/map/rpc", sid, `{"jsonrpc":"2.0","id":2,"method":"echo"}`); r.status != 200 {
		t.Fatalf("echo: %d", r.status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	start := time.Now()
	if err := hs.Shutdown(ctx); err != nil {
		t.Fatalf("http shutdown: %v (after %v)", err, time.Since(start))
	}
	sc.expectEnd(t)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("serve: %v", err)
	}
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestSSE_MaxSessions(t *testing.T) {
	scfg := testSSEConfig()
	scfg.MaxSessions = 1
	env := startSSE(t, testConfig(t), scfg, newTestHandler())
	env.connect(t)
	r := env.post(t, "/map/rpc", "", `{"jsonrpc":"2.0","id":1,"method":"echo"}`)
	if r.status != http.StatusServiceUnavailable || decodeResp(t, r.body).Error.Code != CodeExhausted {
		t.Fatalf("second session: %d %s", r.status, r.body)
	}
}

func TestSSE_DeleteSession(t *testing.T) {
	env := startSSE(t, testConfig(t), testSSEConfig(), newTestHandler())
	sid := env.connect(t)
	sc := env.stream(t, sid, nil)
	del := func() int {
		req, _ := http.NewRequest(http.MethodDelete, env.base+"/map/session", nil)
		req.Header.Set(SessionHeader, sid)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if s := del(); s != http.StatusNoContent {
		t.Fatalf("DELETE: %d", s)
	}
	evs := sc.expectEnd(t)
	if len(evs) != 1 || evs[0].data != `{"code":1000,"reason":"http session deleted"}` {
		t.Fatalf("events before end: %+v", evs)
	}
	if s := del(); s != http.StatusNotFound {
		t.Fatalf("second DELETE: %d", s)
	}
}
