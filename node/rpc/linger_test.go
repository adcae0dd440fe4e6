package rpc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// goroutineID reads the current goroutine's id from its stack header.
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	b, _, _ = bytes.Cut(bytes.TrimPrefix(b, []byte("goroutine ")), []byte(" "))
	return string(b)
}

// TestReaderLinger: requests are served whatever the linger and the gap
// between them. From a connection's second message on, the next request
// within the linger is served on the goroutine that served the last one;
// after the first message, with no linger, or after it, the reader has
// hopped to a fresh goroutine.
func TestReaderLinger(t *testing.T) {
	tests := []struct {
		name   string
		linger time.Duration
		gap    time.Duration
		same   []bool // request i+1 served on request i's goroutine
	}{
		{"no linger, back to back", 0, 0, []bool{false, false, false}},
		{"no linger, gap", 0, 30 * time.Millisecond, []bool{false, false, false}},
		{"within the linger", 10 * time.Second, 30 * time.Millisecond, []bool{false, true, true}},
		{"past the linger", 20 * time.Millisecond, 150 * time.Millisecond, []bool{false, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.ReaderLinger = tt.linger
			h := newTestHandler()
			var mu sync.Mutex
			var ids []string
			h.onHandle = func(_ context.Context, _ *Conn, req *Request) (any, error, bool) {
				if req.Method != "where" {
					return nil, nil, false
				}
				mu.Lock()
				ids = append(ids, goroutineID())
				mu.Unlock()
				return len(ids), nil, true
			}
			_, url := startServer(t, cfg, h)
			ws := rawDial(t, url)
			for i := range len(tt.same) + 1 {
				if i > 0 {
					time.Sleep(tt.gap) // the idle time under test, not a wait for a condition
				}
				r := decodeResp(t, roundTrip(t, ws, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"where"}`, i)))
				if r.Error != nil || string(r.Result) != fmt.Sprint(i+1) {
					t.Fatalf("request %d: %+v", i, r)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for i, want := range tt.same {
				if same := ids[i+1] == ids[i]; same != want {
					t.Errorf("request %d served on goroutine %s after %s: same = %v, want %v", i+1, ids[i+1], ids[i], same, want)
				}
			}
		})
	}
}

// TestReaderLinger_KeepsKeepaliveDeadline: a linger shortens the socket's
// read deadline only for itself; a peer that stops answering pings is
// still dropped after PingInterval+PongTimeout.
func TestReaderLinger_KeepsKeepaliveDeadline(t *testing.T) {
	cfg := testConfig(t)
	cfg.PingInterval, cfg.PongTimeout, cfg.ReaderLinger = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
	_, url := startServer(t, cfg, newTestHandler())
	ws := rawDial(t, url)
	if r := decodeResp(t, roundTrip(t, ws, `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}`)); r.Error != nil {
		t.Fatalf("echo: %+v", r)
	}
	// Read the socket under the library: pings arrive and go unanswered.
	raw := ws.UnderlyingConn()
	start := time.Now()
	_ = raw.SetReadDeadline(start.Add(testTimeout))
	buf := make([]byte, 512)
	for {
		if _, err := raw.Read(buf); err != nil {
			break
		}
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("silent peer dropped after %v, want about PingInterval+PongTimeout (200ms)", el)
	}
}

// TestReaderLinger_PingDuringLinger: a keepalive that arrives while the
// reader lingers is answered there, and the reader lets go (the next
// request is served on a fresh goroutine) instead of waiting inside the
// library for the next data frame with its buffer and stack.
func TestReaderLinger_PingDuringLinger(t *testing.T) {
	cfg := testConfig(t)
	cfg.ReaderLinger = 10 * time.Second
	h := newTestHandler()
	ids := make(chan string, 4)
	h.onHandle = func(_ context.Context, _ *Conn, req *Request) (any, error, bool) {
		if req.Method != "where" {
			return nil, nil, false
		}
		ids <- goroutineID()
		return true, nil, true
	}
	_, url := startServer(t, cfg, h)
	ws := rawDial(t, url)
	where := func(i int) string {
		t.Helper()
		if r := decodeResp(t, roundTrip(t, ws, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"where"}`, i))); r.Error != nil {
			t.Fatalf("request %d: %+v", i, r)
		}
		return <-ids
	}
	where(1)
	second := where(2) // from here on the reader lingers
	if err := ws.WriteControl(websocket.PingMessage, []byte("hb"), time.Now().Add(testTimeout)); err != nil {
		t.Fatal(err)
	}
	// The pong, read under the library (nothing else is in flight), before
	// the next request goes out.
	pong := make([]byte, 4)
	_ = ws.UnderlyingConn().SetReadDeadline(time.Now().Add(testTimeout))
	if _, err := io.ReadFull(ws.UnderlyingConn(), pong); err != nil {
		t.Fatal(err)
	}
	if want := []byte{0x80 | websocket.PongMessage, 2, 'h', 'b'}; !bytes.Equal(pong, want) {
		t.Fatalf("pong frame % x, want % x", pong, want)
	}
	third := where(3)
	if third == second {
		t.Fatalf("request 3 served on the lingering goroutine %s: the ping kept the reader busy", second)
	}
}

// TestReaderLinger_IdleStackShrinks: connections whose handlers grew
// their readers' stacks to 64 KiB come back to a few KiB of stack each
// once idle. The reader waits in a shallow frame, during the linger and
// after it (on a fresh goroutine, TestReaderLinger), so nothing holds the
// deep frames and the GC's stack shrinking can do the rest; a reader that
// waited for input below its handler's frames would fail this.
func TestReaderLinger_IdleStackShrinks(t *testing.T) {
	const conns, deep = 40, 64 // 64 KiB+ of stack per handler
	cfg := testConfig(t)
	cfg.ReaderLinger = 300 * time.Millisecond
	h := newTestHandler()
	h.onHandle = func(_ context.Context, _ *Conn, req *Request) (any, error, bool) {
		if req.Method != "deep" {
			return nil, nil, false
		}
		return deepStack(deep), nil, true // bench_conns_test.go
	}
	_, url := startServer(t, cfg, h)
	stacks := func() uint64 {
		runtime.GC()
		runtime.GC() // the second cycle shrinks and frees what the first found idle
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.StackInuse
	}
	before := stacks()
	for range conns {
		ws := rawDial(t, url)
		for i := range 2 { // the linger starts with the second message
			if r := decodeResp(t, roundTrip(t, ws, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"deep"}`, i))); r.Error != nil {
				t.Fatalf("deep: %+v", r)
			}
		}
	}
	eventually(t, testTimeout, func() error {
		grown := int64(stacks()) - int64(before)
		if per := grown / conns; per > 8<<10 {
			return fmt.Errorf("idle connections hold %d B of stack each, want at most 8 KiB", per)
		}
		return nil
	})
}
