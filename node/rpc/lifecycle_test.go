package rpc

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestKeepalive_DeadPeerDroppedLivePeerKept(t *testing.T) {
	cfg := testConfig(t)
	// The live peer must answer every ping within the read deadline
	// (PingInterval+PongTimeout after its last pong): 150 ms was within
	// reach of a loaded machine's scheduling and dropped it too.
	cfg.PingInterval = 200 * time.Millisecond
	cfg.PongTimeout = 800 * time.Millisecond
	h := newTestHandler()
	_, url := startServer(t, cfg, h)

	live := dialClient(t, url, nil) // reads continuously, so it answers pings
	if _, err := live.Call(context.Background(), "echo", nil); err != nil {
		t.Fatal(err)
	}
	liveSrv := recvConn(t, h.conns)

	dead := rawDial(t, url) // never reads again after this: pings go unanswered
	roundTrip(t, dead, `{"jsonrpc":"2.0","id":1,"method":"echo"}`)
	deadSrv := recvConn(t, h.conns)

	select {
	case <-deadSrv.Done():
	case <-time.After(testTimeout):
		t.Fatal("silent peer not dropped")
	}
	select {
	case <-liveSrv.Done():
		t.Fatal("live peer dropped")
	default:
	}
	if _, err := live.Call(context.Background(), "echo", nil); err != nil {
		t.Fatalf("live peer after several ping intervals: %v", err)
	}
}

func TestShutdown_HardStopWhenContextExpires(t *testing.T) {
	release := make(chan struct{})
	h := newTestHandler()
	h.onHandle = func(_ context.Context, _ *Conn, req *Request) (any, error, bool) {
		if req.Method == "stuck" {
			<-release // ignores ctx on purpose
			return nil, nil, true
		}
		return nil, nil, false
	}
	s, err := NewServer(testConfig(t), h)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.ServeConn(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	callDone := make(chan error, 1)
	go func() {
		_, err := c.Call(context.Background(), "stuck", nil)
		callDone <- err
	}()
	recvConn(t, h.conns)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want deadline exceeded", err)
	}
	// The transport was torn down: the client side ends even though the
	// handler is still stuck.
	select {
	case <-c.Done():
	case <-time.After(testTimeout):
		t.Fatal("client not disconnected by hard stop")
	}
	if err := <-callDone; !errors.Is(err, ErrClosed) {
		t.Fatalf("call = %v", err)
	}
	close(release)
	ctx2, cancel2 := context.WithTimeout(context.Background(), testTimeout)
	defer cancel2()
	if err := s.Shutdown(ctx2); err != nil {
		t.Fatalf("second Shutdown = %v", err)
	}
}

type recObserver struct {
	mu       sync.Mutex
	rpcs     map[string][]int
	opened   int
	closed   int
	rejected map[string]int
}

func (o *recObserver) RPCDone(m string, code int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rpcs[m] = append(o.rpcs[m], code)
}
func (o *recObserver) ConnOpened(string) { o.mu.Lock(); o.opened++; o.mu.Unlock() }
func (o *recObserver) ConnClosed(string) { o.mu.Lock(); o.closed++; o.mu.Unlock() }
func (o *recObserver) FrameRejected(r string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rejected[r]++
}

func TestObserver(t *testing.T) {
	obs := &recObserver{rpcs: map[string][]int{}, rejected: map[string]int{}}
	cfg := testConfig(t)
	cfg.Observer = obs
	s, url := startServer(t, cfg, newTestHandler())
	ws := rawDial(t, url)
	roundTrip(t, ws, `{"jsonrpc":"2.0","id":1,"method":"echo"}`)
	roundTrip(t, ws, `{"jsonrpc":"2.0","id":2,"method":"fail"}`)
	roundTrip(t, ws, `{"jsonrpc":"2.0","id":3,"method":"boom"}`)
	roundTrip(t, ws, `{bad`)
	roundTrip(t, ws, `{"id":4}`)
	_ = ws.Close()
	eventually(t, testTimeout, func() error {
		if s.NumConns() != 0 {
			return errors.New("connection still open")
		}
		return nil
	})
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.rpcs["echo"]) != 1 || obs.rpcs["echo"][0] != 0 || obs.rpcs["fail"][0] != CodeAgentNotFound || obs.rpcs["boom"][0] != CodeInternal {
		t.Errorf("rpcs = %v", obs.rpcs)
	}
	if obs.rejected["parse"] != 1 || obs.rejected["invalid_request"] != 1 {
		t.Errorf("rejected = %v", obs.rejected)
	}
	if obs.opened != 1 || obs.closed != 1 {
		t.Errorf("opened %d closed %d", obs.opened, obs.closed)
	}
}
