package stdio

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/node/rpc"
)

// bridgePeer plays the subprocess: it writes the bridge's stdin and reads
// its stdout.
type bridgePeer struct {
	in   *io.PipeWriter
	out  *bufio.Reader
	done chan error // Run's result
}

func startBridge(t *testing.T, cfg Config) *bridgePeer {
	t.Helper()
	cfg.Logger = testLogger(t)
	b, err := NewBridge(cfg)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &bridgePeer{in: inW, out: bufio.NewReader(outR), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { p.done <- b.Run(ctx, inR, outW); _ = outW.Close() }()
	t.Cleanup(func() {
		cancel()
		_ = inW.Close()
		go func() { _, _ = io.Copy(io.Discard, outR) }() // unblock a pending stdout write; ends at outW.Close
		select {
		case <-p.done:
		case <-time.After(testTimeout):
			t.Error("bridge did not stop")
		}
	})
	return p
}

func (p *bridgePeer) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// line returns the next stdout line (without its newline).
func (p *bridgePeer) line(t *testing.T) string {
	t.Helper()
	ch := make(chan string, 1)
	go func() {
		s, _ := p.out.ReadString('\n')
		ch <- strings.TrimSuffix(s, "\n")
	}()
	select {
	case s := <-ch:
		return s
	case <-time.After(testTimeout):
		t.Fatal("no line from the bridge")
		return ""
	}
}

func testBridgeConfig(urls ...string) Config {
	cfg := DefaultConfig()
	cfg.URLs = urls
	cfg.MaxFrameBytes = 1024
	cfg.MinBackoff, cfg.MaxBackoff = 10*time.Millisecond, 50*time.Millisecond
	cfg.ReconnectTimeout = testTimeout
	return cfg
}

// tcpProxy forwards 127.0.0.1 connections to target; cut drops them all
// without a WebSocket close, as a dead node or network would.
type tcpProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); _, _ = io.Copy(u, c); _ = u.Close() }()
			go func() { defer p.wg.Done(); _, _ = io.Copy(c, u); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() { p.cut(); p.wg.Wait() })
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

// cut closes the listener and every proxied connection.
func (p *tcpProxy) cut() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// wsServer is a Server behind its own httptest server.
func wsServer(t *testing.T, h rpc.Handler) (*httptest.Server, string) {
	t.Helper()
	s, err := rpc.NewServer(testServerConfig(t), h)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		_ = s.Shutdown(ctx)
		hs.Close()
	})
	return hs, wsURL(hs.URL)
}

func TestBridge_Relay(t *testing.T) {
	h := newTestHandler()
	h.onHandle = pushHook
	_, url := wsServer(t, h)
	p := startBridge(t, testBridgeConfig(url))
	big := `{"jsonrpc":"2.0","id":"big","method":"echo","params":{"pad":"` + strings.Repeat("x", 2000) + `"}}`
	tests := []struct{ name, in, want string }{
		{"request", `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}`, `{"jsonrpc":"2.0","id":1,"result":{"a":1}}`},
		{"server error", `{"jsonrpc":"2.0","id":2,"method":"nope"}`, `{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"Method not found: nope","data":{"category":"protocol","retryable":false}}}`},
		{"oversized line", big, `{"jsonrpc":"2.0","id":"big","error":{"code":-32600,"message":"Message too large","data":{"category":"protocol","retryable":false,"details":{"limit":1024}}}}`},
		{"garbage", `{oops`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error","data":{"category":"protocol","retryable":false,"details":{"reason":"invalid JSON"}}}}`},
		{"invalid utf-8", "\"\xff\"", `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error","data":{"category":"protocol","retryable":false,"details":{"reason":"invalid UTF-8"}}}}`},
		{"batch", `[{"jsonrpc":"2.0","id":3,"method":"echo","params":{}},{"jsonrpc":"2.0","method":"note"}]`, `[{"jsonrpc":"2.0","id":3,"result":{}}]`},
		{"still alive", `{"jsonrpc":"2.0","id":4,"method":"echo","params":{"b":2}}`, `{"jsonrpc":"2.0","id":4,"result":{"b":2}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.send(t, tt.in)
			if got := p.line(t); got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	// Server notifications become lines too.
	p.send(t, pushBody(5, 2, 0))
	for _, want := range []string{
		`{"jsonrpc":"2.0","method":"map/event","params":{"n":0}}`,
		`{"jsonrpc":"2.0","method":"map/event","params":{"n":1}}`,
		`{"jsonrpc":"2.0","id":5,"result":{"pushed":2}}`,
	} {
		if got := p.line(t); got != want {
			t.Fatalf("got %s want %s", got, want)
		}
	}
}

// resumeHandler emulates map/connect's session resume and blocks "slow"
// until its connection ends.
type resumeHandler struct {
	*testHandler
	slow     chan struct{} // one value per "slow" request being handled
	mu       sync.Mutex
	connects []map[string]any
}

func newResumeHandler() *resumeHandler {
	r := &resumeHandler{testHandler: newTestHandler(), slow: make(chan struct{}, 8)}
	r.onHandle = func(ctx context.Context, _ *rpc.Conn, req *rpc.Request) (any, error, bool) {
		switch req.Method {
		case "map/connect":
			var p map[string]any
			_ = json.Unmarshal(req.Params, &p)
			r.mu.Lock()
			r.connects = append(r.connects, p)
			r.mu.Unlock()
			resumed := p["sessionId"] == "s1" && p["resumeToken"] == "t1"
			return map[string]any{"sessionId": "s1", "resumeToken": "t1", "reconnected": resumed}, nil, true
		case "slow":
			r.slow <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err(), true
		}
		return nil, nil, false
	}
	return r
}

func (r *resumeHandler) connectParams() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.connects...)
}

// When the node's connection drops, requests in flight are answered with
// connection_lost, the bridge fails over to the next URL, replays the
// subprocess's map/connect with its session credentials and says so.
func TestBridge_FailoverResumesSession(t *testing.T) {
	ha, hb := newResumeHandler(), newResumeHandler()
	hsA, _ := wsServer(t, ha)
	proxyA := newTCPProxy(t, hsA.Listener.Addr().String())
	urlA := "ws://" + proxyA.addr() + "/map"
	_, urlB := wsServer(t, hb)
	p := startBridge(t, testBridgeConfig(urlA, urlB))
	p.send(t, `{"jsonrpc":"2.0","id":1,"method":"map/connect","params":{"protocolVersion":1,"name":"sub"}}`)
	if got := p.line(t); !strings.Contains(got, `"sessionId":"s1"`) {
		t.Fatalf("connect: %s", got)
	}
	p.send(t, `{"jsonrpc":"2.0","id":"pending","method":"slow"}`)
	select {
	case <-ha.slow:
	case <-time.After(testTimeout):
		t.Fatal("slow request never reached node A")
	}
	proxyA.cut()

	lost := p.line(t)
	if !strings.Contains(lost, `"id":"pending"`) || !strings.Contains(lost, `"connection_lost"`) {
		t.Fatalf("in-flight request: %s", lost)
	}
	var note struct {
		Method string
		Params map[string]any
	}
	if err := json.Unmarshal([]byte(p.line(t)), &note); err != nil || note.Method != ReconnectedMethod {
		t.Fatalf("reconnect notice: %+v %v", note, err)
	}
	if note.Params["server"] != urlB || note.Params["resumed"] != true || note.Params["reconnected"] != true || note.Params["sessionId"] != "s1" {
		t.Fatalf("reconnect notice params %v", note.Params)
	}
	got := hb.connectParams()
	if len(got) != 1 || got[0]["name"] != "sub" || got[0]["protocolVersion"] != float64(1) || got[0]["resumeToken"] != "t1" {
		t.Fatalf("replayed map/connect params on B: %v", got)
	}
	p.send(t, `{"jsonrpc":"2.0","id":2,"method":"echo","params":{"via":"b"}}`)
	if got := p.line(t); got != `{"jsonrpc":"2.0","id":2,"result":{"via":"b"}}` {
		t.Fatalf("after failover: %s", got)
	}
}

// stdin EOF: the bridge waits for the answers in flight, then Run returns nil.
func TestBridge_StdinEOFDrains(t *testing.T) {
	_, url := wsServer(t, newTestHandler())
	p := startBridge(t, testBridgeConfig(url))
	p.send(t, `{"jsonrpc":"2.0","id":1,"method":"echo","params":{}}`)
	_ = p.in.Close()
	if got := p.line(t); got != `{"jsonrpc":"2.0","id":1,"result":{}}` {
		t.Fatalf("answer after EOF: %s", got)
	}
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Run did not return after stdin EOF")
	}
}

func TestBridge_ConnectTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there any more
	cfg := testBridgeConfig("ws://" + addr + "/map")
	cfg.ConnectTimeout = 200 * time.Millisecond
	b, err := NewBridge(cfg)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	defer inW.Close()
	err = b.Run(context.Background(), inR, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "no MAP server reachable") {
		t.Fatalf("Run: %v", err)
	}
}

func TestBridgeConfig_Validate(t *testing.T) {
	if err := testBridgeConfig("ws://x/map").Validate(); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*Config){
		"no urls":  func(c *Config) { c.URLs = nil },
		"frame":    func(c *Config) { c.MaxFrameBytes = 10 },
		"queue":    func(c *Config) { c.QueueLen = 0 },
		"backoff":  func(c *Config) { c.MaxBackoff = c.MinBackoff / 2 },
		"timeouts": func(c *Config) { c.PongTimeout = 0 },
	} {
		c := testBridgeConfig("ws://x/map")
		edit(&c)
		if err := c.Validate(); !errors.Is(err, rpc.ErrInvalidConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
