package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

func TestCall_BothDirections(t *testing.T) {
	h := newTestHandler()
	_, url := startServer(t, testConfig(t), h)
	clientH := newTestHandler()
	c := dialClient(t, url, clientH)
	ctx := context.Background()

	// client -> server
	res, err := c.Call(ctx, "echo", json.RawMessage(`{"q":"hi"}`))
	if err != nil || string(res) != `{"q":"hi"}` {
		t.Fatalf("client call: %s %v", res, err)
	}
	// server -> client, on the server's Conn for this client.
	srv := recvConn(t, h.conns)
	res, err = srv.Call(ctx, "echo", map[string]any{"from": "server"})
	if err != nil || string(res) != `{"from":"server"}` {
		t.Fatalf("server call: %s %v", res, err)
	}
	_, err = srv.Call(ctx, "fail", nil)
	if !IsCode(err, CodeAgentNotFound) {
		t.Fatalf("server call error = %v", err)
	}
	// Many concurrent calls are matched to the right callers.
	errs := make(chan error, 50)
	for i := range 50 {
		go func() {
			want := `{"i":` + string(rune('0'+i%10)) + `}`
			got, err := c.Call(ctx, "echo", json.RawMessage(want))
			if err == nil && string(got) != want {
				err = errors.New("mismatched reply " + string(got) + " for " + want)
			}
			errs <- err
		}()
	}
	for range 50 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestCall_InHandlerRefused(t *testing.T) {
	h := newTestHandler()
	_, url := startServer(t, testConfig(t), h)
	c := dialClient(t, url, nil)
	_, err := c.Call(context.Background(), "callme", nil)
	if !IsCode(err, CodeInternal) {
		t.Fatalf("err = %v, want internal error", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !errors.Is(h.callErr, ErrCallInHandler) {
		t.Fatalf("Call inside handler = %v, want ErrCallInHandler", h.callErr)
	}
}

func TestCall_ContextAndClose(t *testing.T) {
	h := newTestHandler()
	_, url := startServer(t, testConfig(t), h)
	// A raw peer that never answers our Calls.
	ws := rawDial(t, url)
	roundTrip(t, ws, `{"jsonrpc":"2.0","id":1,"method":"echo"}`)
	srv := recvConn(t, h.conns)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := srv.Call(ctx, "echo", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := srv.Call(context.Background(), "echo", nil)
		done <- err
	}()
	readFrame(t, ws) // the request arrived; now the peer vanishes
	_ = ws.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("err = %v, want ErrClosed", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Call did not end when the connection closed")
	}
	if closed := recvConn(t, h.closed); closed != srv {
		t.Fatal("Closed called for another connection")
	}
	if err := srv.Notify("x", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Notify after close = %v", err)
	}
}

func TestClose_ReplyThenClose(t *testing.T) {
	_, url := startServer(t, testConfig(t), newTestHandler())
	ws := rawDial(t, url)
	r := decodeResp(t, roundTrip(t, ws, `{"jsonrpc":"2.0","id":1,"method":"bye"}`))
	if string(r.Result) != `{"ok":true}` {
		t.Fatalf("reply = %+v", r)
	}
	_ = ws.SetReadDeadline(time.Now().Add(testTimeout))
	_, _, err := ws.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseNormalClosure || ce.Text != "bye requested" {
		t.Fatalf("read after bye = %v", err)
	}
}

func TestNotify_Encoding(t *testing.T) {
	h := newTestHandler()
	_, url := startServer(t, testConfig(t), h)
	ws := rawDial(t, url)
	roundTrip(t, ws, `{"jsonrpc":"2.0","id":1,"method":"echo"}`)
	srv := recvConn(t, h.conns)
	tests := []struct {
		name   string
		send   func() error
		want   string
		reject bool
	}{
		{"struct", func() error { return srv.Notify("map/event", struct{ A int }{1}) }, `{"jsonrpc":"2.0","method":"map/event","params":{"A":1}}`, false},
		{"nil params", func() error { return srv.Notify("map/x", nil) }, `{"jsonrpc":"2.0","method":"map/x"}`, false},
		{"raw", func() error { return srv.NotifyRaw("map/message", json.RawMessage(`{"message":{"id":"m"}}`)) }, `{"jsonrpc":"2.0","method":"map/message","params":{"message":{"id":"m"}}}`, false},
		{"escaped method", func() error { return srv.Notify(`a"b`, nil) }, `{"jsonrpc":"2.0","method":"a\"b"}`, false},
		{"array params", func() error { return srv.Notify("x", []int{1}) }, "", true},
		{"raw array", func() error { return srv.NotifyRaw("x", json.RawMessage(`[1]`)) }, "", true},
		{"unencodable", func() error { return srv.Notify("x", map[string]any{"f": func() {}}) }, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.send()
			if tt.reject {
				if err == nil {
					t.Fatal("expected an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := string(readFrame(t, ws)); got != tt.want {
				t.Fatalf("frame = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestNotify_SlowConsumerDoesNotBlock(t *testing.T) {
	cfg := testConfig(t)
	cfg.SendQueueLen = 64
	cfg.WriteTimeout = time.Second
	h := newTestHandler()
	_, url := startServer(t, cfg, h)
	ws := rawDial(t, url) // never reads after the first reply
	roundTrip(t, ws, `{"jsonrpc":"2.0","id":1,"method":"echo"}`)
	srv := recvConn(t, h.conns)

	params := json.RawMessage(`{"p":"` + strings.Repeat("y", 4000) + `"}`)
	start := time.Now()
	var sent, slow int
	// Keep producing until the stuck peer is dropped by WriteTimeout: the
	// kernel's socket buffers absorb a few MB first, then the queue fills
	// and stays full. Notify must never block meanwhile.
	for done := false; !done; {
		if time.Since(start) > testTimeout {
			t.Fatalf("stuck consumer not disconnected (sent %d, slow %d)", sent, slow)
		}
		t0 := time.Now()
		err := srv.NotifyRaw("map/event", params)
		// Blocking would mean waiting for the stuck writer (up to
		// WriteTimeout); half of it leaves room for a loaded machine's
		// scheduling, which 100 ms did not.
		if d := time.Since(t0); d > cfg.WriteTimeout/2 {
			t.Fatalf("Notify blocked for %v", d)
		}
		switch {
		case err == nil:
			sent++
		case errors.Is(err, ErrSlowConsumer):
			slow++
			select { // back off instead of spinning on a full queue
			case <-srv.Done():
			case <-time.After(time.Millisecond):
			}
		case errors.Is(err, ErrClosed):
			done = true
		default:
			t.Fatalf("notify: %v", err)
		}
	}
	if slow == 0 {
		t.Fatalf("sent %d notifications without ErrSlowConsumer", sent)
	}
	t.Logf("sent %d, refused %d, dropped after %v", sent, slow, time.Since(start))
	<-srv.Done()
}

func TestShutdown_WithOpenConns(t *testing.T) {
	cfg := testConfig(t)
	h := newTestHandler()
	s, err := NewServer(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := newHTTPServer(s)
	go func() { _ = hs.Serve(ln) }()
	url := "ws://" + ln.Addr().String() + "/map"
	var clients []*Conn
	var closedByServer atomic.Int32
	for range 3 {
		c := dialClient(t, url, nil)
		if _, err := c.Call(context.Background(), "echo", nil); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	raw := rawDial(t, url)
	roundTrip(t, raw, `{"jsonrpc":"2.0","id":1,"method":"echo"}`)
	eventually(t, testTimeout, func() error {
		if n := s.NumConns(); n != 4 {
			return errors.New("conns not registered yet")
		}
		return nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	for _, c := range clients {
		select {
		case <-c.Done():
			closedByServer.Add(1)
		case <-time.After(testTimeout):
			t.Fatal("client not closed by shutdown")
		}
	}
	_, _, err = raw.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
		t.Fatalf("raw client saw %v, want 1001", err)
	}
	if s.NumConns() != 0 {
		t.Fatalf("%d conns left", s.NumConns())
	}
	if _, err := s.ServeConn(context.Background(), nil); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("ServeConn after shutdown = %v", err)
	}
	_ = hs.Close()
	for range 4 {
		recvConn(t, h.closed)
	}
}

// TestStart_PipelinesInOrder: requests started one after the other reach
// the peer in that order, and each Pending gets its own answer.
func TestStart_PipelinesInOrder(t *testing.T) {
	h := newTestHandler()
	var mu sync.Mutex
	var order []string
	h.onHandle = func(_ context.Context, _ *Conn, req *Request) (any, error, bool) {
		mu.Lock()
		order = append(order, string(req.Params))
		mu.Unlock()
		return nil, nil, false
	}
	_, url := startServer(t, testConfig(t), h)
	c := dialClient(t, url, nil)
	ctx := context.Background()
	var pend []*Pending
	var want []string
	for i := range 100 {
		p := json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
		pd, err := c.Start(ctx, "echo", p)
		if err != nil {
			t.Fatal(err)
		}
		pend, want = append(pend, pd), append(want, string(p))
	}
	for i, pd := range pend {
		got, err := pd.Wait(ctx)
		if err != nil || string(got) != want[i] {
			t.Fatalf("reply %d = %s %v, want %s", i, got, err, want[i])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(order, want) {
		t.Fatalf("server saw %v, want %v", order, want)
	}
}
