package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/concordmap/concord/node/internal/testlog"
	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/router"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// scaled stretches a test timeout by CONCORD_TEST_TIMEOUT_SCALE (slow CI).
func scaled(d time.Duration) time.Duration {
	if f, err := strconv.ParseFloat(os.Getenv("CONCORD_TEST_TIMEOUT_SCALE"), 64); err == nil && f > 0 {
		return time.Duration(float64(d) * f)
	}
	return d
}

const waitTimeout = 20 * time.Second

// eventually checks f now and every 25 ms until it returns nil, failing
// the test with the last error after timeout.
func eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(scaled(timeout))
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not reached within %s: %v", scaled(timeout), err)
		}
		time.Sleep(25 * time.Millisecond) // polling interval of the eventually helper
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), scaled(waitTimeout))
	t.Cleanup(cancel)
	return ctx
}

func testLogger(t testing.TB, node string) *slog.Logger {
	return slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", node)
}

// testConfig is a fast Config for loopback tests.
func testConfig(t testing.TB, nodeID string) Config {
	cfg := DefaultConfig()
	cfg.NodeID = nodeID
	cfg.Logger = testLogger(t, nodeID)
	cfg.DialTimeout = scaled(500 * time.Millisecond)
	cfg.ForwardRetryTimeout = scaled(time.Second)
	cfg.ForwardBackoff = 10 * time.Millisecond
	cfg.ForwardMaxBackoff = 100 * time.Millisecond
	cfg.RelayDeliveryTimeout = scaled(time.Second)
	cfg.RelayReconnectBackoff = 10 * time.Millisecond
	cfg.RelayReconnectMaxBackoff = 100 * time.Millisecond
	cfg.ReconcileInterval = 50 * time.Millisecond
	cfg.DeadServerCleanupDelay = 300 * time.Millisecond
	// Every server votes, as these tests were written for; the autopilot's
	// rules are plan tests (autopilot_test.go) and cluster-test scenarios.
	cfg.RaftVoters = 0
	return cfg
}

// fakeMembers is a settable MemberLister and AddrResolver source.
type fakeMembers struct {
	mu sync.Mutex
	ms map[string]membership.Member
}

func newFakeMembers() *fakeMembers { return &fakeMembers{ms: map[string]membership.Member{}} }

func (f *fakeMembers) set(m membership.Member) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m.Status == 0 {
		m.Status = membership.StatusAlive
	}
	if m.Role == "" {
		m.Role = membership.RoleServer
	}
	f.ms[m.ID] = m
}

func (f *fakeMembers) setStatus(id string, s membership.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.ms[id]
	m.Status = s
	f.ms[id] = m
}

func (f *fakeMembers) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.ms, id)
}

func (f *fakeMembers) Members() []membership.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]membership.Member, 0, len(f.ms))
	for _, m := range f.ms {
		out = append(out, m)
	}
	return out
}

// staticResolver resolves from a map; a missing id is not alive.
type staticResolver struct {
	mu    sync.Mutex
	addrs map[string]string
}

func newResolver(kv ...string) *staticResolver {
	r := &staticResolver{addrs: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		r.addrs[kv[i]] = kv[i+1]
	}
	return r
}

func (r *staticResolver) set(id, addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if addr == "" {
		delete(r.addrs, id)
		return
	}
	r.addrs[id] = addr
}

func (r *staticResolver) GRPCAddr(id string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.addrs[id]
	return a, ok
}

func (r *staticResolver) Peers() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.addrs))
	for id := range r.addrs {
		out = append(out, id)
	}
	return out
}

// listen opens a loopback listener on addr ("" for a free port).
func listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	return lis
}

// runningServer is a Server serving on a loopback listener.
type runningServer struct {
	*Server
	addr   string
	served chan error
	once   sync.Once
}

// startServer serves a new Server on lis (a free port when nil) and stops
// it at cleanup.
func startServer(t testing.TB, cfg Config, deps ServerDeps, lis net.Listener) *runningServer {
	t.Helper()
	if lis == nil {
		lis = listen(t, "")
	}
	s, err := NewServer(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	rs := &runningServer{Server: s, addr: lis.Addr().String(), served: make(chan error, 1)}
	go func() { rs.served <- s.Serve(lis) }()
	t.Cleanup(func() { rs.stop(t) })
	return rs
}

// stop shuts the server down and waits for Serve to return.
func (rs *runningServer) stop(t testing.TB) {
	rs.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), scaled(5*time.Second))
		defer cancel()
		if err := rs.Shutdown(ctx); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
		if err := <-rs.served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
}

// recorder is a LocalDeliverer that records what it delivers, per
// recipient, and fails recipients named in fail.
type recorder struct {
	mu    sync.Mutex
	got   map[string][]string // recipient -> messages in order
	total int
	fail  map[string]error
	block chan struct{} // when non-nil, DeliverLocal waits for it to close
}

func newRecorder() *recorder {
	return &recorder{got: map[string][]string{}, fail: map[string]error{}}
}

func (r *recorder) DeliverLocal(ctx context.Context, env *router.Envelope) error {
	r.mu.Lock()
	block := r.block
	r.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.fail[env.RecipientAgentID]; err != nil {
		return err
	}
	r.got[env.RecipientAgentID] = append(r.got[env.RecipientAgentID], string(env.Message))
	r.total++
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

func (r *recorder) messages(agent string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got[agent]...)
}

// newTestPeerStreams builds a PeerStreams that Closes at cleanup.
func newTestPeerStreams(t testing.TB, cfg Config, res AddrResolver, peers PeerLister) *PeerStreams {
	t.Helper()
	r, err := NewPeerStreams(cfg, res, peers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("relay close: %v", err)
		}
	})
	return r
}

func envelope(agent, msg string) *router.Envelope {
	return &router.Envelope{Message: []byte(msg), RecipientAgentID: agent, RecipientSessionID: "s-" + agent}
}

func mustBeWithin(t testing.TB, start time.Time, limit time.Duration, what string) {
	t.Helper()
	if el := time.Since(start); el > scaled(limit) {
		t.Fatalf("%s took %s, want within %s", what, el, scaled(limit))
	}
}

var errTest = errors.New("test error")

func fmtMsg(g, i int) string { return mapMsg(fmt.Sprintf("g%d-%d", g, i)) }

// mapMsg is a minimal MAP Message with the given id, as the relay's door
// check wants it.
func mapMsg(id string) string {
	return `{"id":"` + id + `","from":"agent-a","to":{"agent":"x"},"payload":{}}`
}
