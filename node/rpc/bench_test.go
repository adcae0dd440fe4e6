package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coder "github.com/coder/websocket"
	"github.com/gorilla/websocket"
)

// payload256 is a ~256-byte notification params object.
var payload256 = json.RawMessage(`{"message":{"id":"01J0000000000000000000000","from":"agent-a","to":{"agent":"agent-b"},"timestamp":1700000000000,"payload":"` + strings.Repeat("p", 120) + `"}}`)

// BenchmarkWSEchoBaseline is raw gorilla/websocket over loopback: the server
// echoes each 256-byte text frame with one WriteMessage (one write(2) per
// frame, as a straightforward relay does); the client pipelines, writing
// from one goroutine (corked in bursts of 64) while another reads. It is the
// reference the MAP send benchmark is compared to.
func BenchmarkWSEchoBaseline(b *testing.B) {
	up := websocket.Upgrader{ReadBufferSize: wsReadBufferSize, WriteBufferSize: wsWriteBufferSize}
	benchEcho(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		for {
			mt, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			if err := ws.WriteMessage(mt, data); err != nil {
				return
			}
		}
	}))
}

// BenchmarkWSEchoCoder is the same echo served by coder/websocket (the other
// library in go.mod), kept to document why gorilla/websocket was chosen.
func BenchmarkWSEchoCoder(b *testing.B) {
	benchEcho(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := coder.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ws.SetReadLimit(1 << 20)
		ctx := context.Background()
		for {
			mt, data, err := ws.Read(ctx)
			if err != nil {
				return
			}
			if err := ws.Write(ctx, mt, data); err != nil {
				return
			}
		}
	}))
}

// benchEcho drives an echo server with a pipelined gorilla client: one
// goroutine writes 256-byte frames (corked in bursts of 64), another reads
// the echoes.
func benchEcho(b *testing.B, h http.Handler) {
	hs := httptest.NewServer(h)
	defer hs.Close()
	var cork *corkConn
	d := websocket.Dialer{
		ReadBufferSize: wsReadBufferSize, WriteBufferSize: wsWriteBufferSize,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			cork = newCorkConn(nc, 10*time.Second)
			return cork, nil
		},
	}
	ws, _, err := d.Dial("ws"+strings.TrimPrefix(hs.URL, "http"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ws.Close()
	msg := make([]byte, 256)
	for i := range msg {
		msg[i] = 'a' + byte(i%26)
	}
	b.SetBytes(int64(len(msg)))
	b.ResetTimer()
	start := time.Now()
	readErr := make(chan error, 1)
	go func() {
		for range b.N {
			if _, _, err := ws.ReadMessage(); err != nil {
				readErr <- err
				return
			}
		}
		readErr <- nil
	}()
	for i := 0; i < b.N; i += 64 {
		cork.cork()
		for j := i; j < min(i+64, b.N); j++ {
			if err := ws.WriteMessage(websocket.TextMessage, msg); err != nil {
				b.Fatal(err)
			}
		}
		if err := cork.uncork(); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-readErr; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

// countingHandler counts inbound notifications and fires done at target.
type countingHandler struct {
	n      atomic.Int64
	target int64
	done   chan struct{}
}

func (h *countingHandler) Handle(_ context.Context, _ *Conn, req *Request) (any, error) {
	if h.n.Add(1) == h.target {
		close(h.done)
	}
	return nil, nil
}
func (h *countingHandler) Closed(*Conn) {}

// benchPair starts a server on loopback and dials one client with ch.
// The returned server-side Conn is the client's peer.
func benchPair(b *testing.B, ch Handler) (srv *Conn, cli *Conn, stop func()) {
	cfg := DefaultConfig()
	cfg.SendQueueLen = 8192
	h := newTestHandler()
	s, err := NewServer(cfg, h)
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(s)
	ccfg := DefaultClientConfig()
	ccfg.SendQueueLen = 8192
	cli, err = Dial(context.Background(), "ws"+strings.TrimPrefix(hs.URL, "http"), ccfg, ch)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cli.Call(context.Background(), "echo", nil); err != nil {
		b.Fatal(err)
	}
	srv = <-h.conns
	return srv, cli, func() {
		_ = cli.Close("bench done")
		<-cli.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		hs.Close()
	}
}

// BenchmarkRPCNotifyThroughput measures server→client notifications of a
// ~256-byte params object through the full stack (queue, corked writer,
// gorilla framing, client decode, handler). A full queue makes the producer
// yield and retry; "slow/op" reports how often that happened.
func BenchmarkRPCNotifyThroughput(b *testing.B) {
	ch := &countingHandler{target: int64(b.N), done: make(chan struct{})}
	srv, _, stop := benchPair(b, ch)
	defer stop()
	b.SetBytes(int64(len(payload256)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var slow int
	for i := 0; i < b.N; {
		err := srv.NotifyRaw("map/message", payload256)
		switch {
		case err == nil:
			i++
		case errors.Is(err, ErrSlowConsumer):
			slow++
			time.Sleep(50 * time.Microsecond) // producer backs off; the queue drains
		default:
			b.Fatal(err)
		}
	}
	<-ch.done
	el := time.Since(start)
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
	b.ReportMetric(float64(slow)/float64(b.N), "slow/op")
}

// BenchmarkRPCCallThroughput measures client→server request/response pairs
// with 64 concurrent callers on one connection (pipelined requests).
func BenchmarkRPCCallThroughput(b *testing.B) {
	_, cli, stop := benchPair(b, nil)
	defer stop()
	const callers = 64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if _, err := cli.Call(context.Background(), "echo", payload256); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
}

func BenchmarkDecodeFrame(b *testing.B) {
	frame := []byte(`{"jsonrpc":"2.0","id":123,"method":"map/send","params":` + string(payload256) + `}`)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if f := decodeFrame(frame, 10); f.fatal != nil || f.oneE != nil {
			b.Fatal("decode failed")
		}
	}
}

func BenchmarkDecodeFrameStdlib(b *testing.B) {
	frame := []byte(`{"jsonrpc":"2.0","id":123,"method":"map/send","params":` + string(payload256) + `}`)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		var m struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Method  string          `json:"method"`
			Params  json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal(frame, &m); err != nil {
			b.Fatal(err)
		}
	}
}

// relayHandler answers every "relay" notification by notifying its params
// back on the same connection: the shape of map/send without routing.
type relayHandler struct {
	testHandler
	dropped atomic.Int64 // ErrSlowConsumer on the way back
}

func (h *relayHandler) Handle(ctx context.Context, c *Conn, req *Request) (any, error) {
	if req.Method == "relay" {
		err := c.NotifyRaw("map/message", req.Params)
		if errors.Is(err, ErrSlowConsumer) {
			h.dropped.Add(1)
		}
		return nil, err
	}
	return h.testHandler.Handle(ctx, c, req)
}

// BenchmarkRPCRelayEcho is the JSON-RPC counterpart of
// BenchmarkWSEchoBaseline: the client pipelines ~256-byte notifications, the
// server's handler decodes each and notifies it back through the queue and
// corked writer, the client's handler counts them.
func BenchmarkRPCRelayEcho(b *testing.B) {
	cfg := DefaultConfig()
	cfg.SendQueueLen = 8192
	rh := &relayHandler{testHandler: *newTestHandler()}
	s, err := NewServer(cfg, rh)
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(s)
	defer hs.Close()
	ch := &countingHandler{target: int64(b.N), done: make(chan struct{})}
	ccfg := DefaultClientConfig()
	ccfg.SendQueueLen = 8192
	cli, err := Dial(context.Background(), "ws"+strings.TrimPrefix(hs.URL, "http"), ccfg, ch)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cli.Close("bench done")
		<-cli.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	}()
	b.SetBytes(int64(len(payload256)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; {
		switch err := cli.NotifyRaw("relay", payload256); {
		case err == nil:
			i++
		case errors.Is(err, ErrSlowConsumer):
			time.Sleep(50 * time.Microsecond)
		default:
			b.Fatal(err)
		}
	}
	// Every frame either comes back or was dropped by the server's full
	// queue; a bounded wait keeps a bug from hanging the benchmark.
	deadline := time.Now().Add(30 * time.Second)
	for ch.n.Load()+rh.dropped.Load() < int64(b.N) {
		if time.Now().After(deadline) {
			b.Fatalf("received %d + dropped %d of %d", ch.n.Load(), rh.dropped.Load(), b.N)
		}
		time.Sleep(100 * time.Microsecond)
	}
	b.ReportMetric(float64(ch.n.Load())/time.Since(start).Seconds(), "msgs/s")
	b.ReportMetric(float64(rh.dropped.Load())/float64(b.N), "dropped/op")
}
