package membership

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/concordmap/concord/raftstore/testlog"
)

// TestMain fails the run if goroutines outlive the tests. memberlist's
// Shutdown does not wait for its probe goroutine, which may finish its
// current round (up to the awareness-scaled probe interval, several seconds
// under load) afterwards; goleak's own retries give up after about half a
// second, so the check is retried here for up to leakGrace. A goroutine that
// never exits still fails the run.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		const leakGrace = 20 * time.Second
		deadline := time.Now().Add(leakGrace)
		for {
			err := goleak.Find()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "goleak: goroutines left %v after the tests: %v\n", leakGrace, err)
				code = 1
				break
			}
			time.Sleep(100 * time.Millisecond) // polling for goroutines to exit; there is no event to wait on
		}
	}
	os.Exit(code)
}

var (
	testKey  = []byte("0123456789abcdef")
	otherKey = []byte("fedcba9876543210")
)

// scaled stretches a test timeout by CONCORD_TEST_TIMEOUT_SCALE (slow CI).
func scaled(d time.Duration) time.Duration {
	if f, err := strconv.ParseFloat(os.Getenv("CONCORD_TEST_TIMEOUT_SCALE"), 64); err == nil && f > 0 {
		return time.Duration(float64(d) * f)
	}
	return d
}

// eventually checks f now and every 25 ms until it returns nil, failing the
// test with f's last error after timeout (scaled).
func eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(scaled(timeout))
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: %v", scaled(timeout), err)
		}
		<-tick.C
	}
}

// consistently checks f every 25 ms for d and fails at the first error. It
// is the negative counterpart of eventually: something must NOT happen.
func consistently(t testing.TB, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		if err := f(); err != nil {
			t.Fatal(err)
		}
		<-tick.C
	}
}

// testLogger logs to t's output through testlog.Output: memberlist's
// suspicion timers can fire (and log) after Shutdown, and writing to a
// finished test's output panics.
func testLogger(t testing.TB, node string, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: level})).With("node", node)
}

func testConfig(t testing.TB, id string) Config {
	cfg := DefaultConfig()
	cfg.NodeID = id
	cfg.SystemID = "sys-a"
	cfg.BindAddr = "127.0.0.1"
	cfg.BindPort = 0
	cfg.Meta = NodeMeta{
		HTTPAddr: "127.0.0.1:17700",
		GRPCAddr: "127.0.0.1:17701",
		RaftAddr: "127.0.0.1:17702",
		Version:  "v0.0.0-test",
		Role:     RoleServer,
	}
	cfg.GossipKey = testKey
	cfg.JoinRetryInterval = 50 * time.Millisecond
	cfg.JoinMaxBackoff = 200 * time.Millisecond
	cfg.Timings = TestTimings()
	cfg.Logger = testLogger(t, id, slog.LevelInfo)
	cfg.JitterSource = rand.NewPCG(1, uint64(len(id)))
	return cfg
}

// mustStart creates and starts a node and shuts it down at cleanup.
func mustStart(t testing.TB, cfg Config) *Membership {
	t.Helper()
	m, err := startNode(t, cfg)
	if err != nil {
		t.Fatalf("Start(%s): %v", cfg.NodeID, err)
	}
	return m
}

// startNode creates and starts a node; one that started is shut down at
// cleanup.
func startNode(t testing.TB, cfg Config) (*Membership, error) {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.NodeID, err)
	}
	if err := m.Start(t.Context()); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		if err := m.Shutdown(); err != nil {
			t.Errorf("Shutdown(%s): %v", cfg.NodeID, err)
		}
	})
	return m, nil
}

// startReserved is mustStart for a node on a port from reservePorts. The
// port was released before the node binds it, and on a busy host another
// process can take it in between; the node then starts on a port of its
// own choosing instead (logged), still joining the others through theirs.
func startReserved(t testing.TB, cfg Config) *Membership {
	t.Helper()
	m, err := startNode(t, cfg)
	// memberlist formats the listen error with %v: errors.Is cannot see
	// the errno, its text can.
	if err != nil && strings.Contains(err.Error(), syscall.EADDRINUSE.Error()) {
		t.Logf("%s: reserved port %d taken before it bound (%v); starting on a free one", cfg.NodeID, cfg.BindPort, err)
		cfg.BindPort = 0
		return mustStart(t, cfg)
	}
	if err != nil {
		t.Fatalf("Start(%s): %v", cfg.NodeID, err)
	}
	return m
}

// reservePorts finds n ports free for both TCP and UDP on 127.0.0.1, for
// tests that must know a node's address before it starts (all listeners
// are held until every port is chosen, so the n ports are distinct).
func reservePorts(t testing.TB, n int) []int {
	t.Helper()
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	ports := make([]int, 0, n)
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closers = append(closers, l)
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // UDP side taken; try another port
		}
		closers = append(closers, u)
		ports = append(ports, port)
	}
	return ports
}

func addrOf(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// aliveIDs returns the ids of m's alive members.
func aliveIDs(m *Membership) []string {
	var ids []string
	for _, mem := range m.Members() {
		if mem.Status == StatusAlive {
			ids = append(ids, mem.ID)
		}
	}
	return ids
}

// seesAlive reports whether m sees exactly want (sorted) as alive.
func seesAlive(m *Membership, want []string) error {
	if got := aliveIDs(m); !slices.Equal(got, want) {
		return fmt.Errorf("%s sees alive %v, want %v", m.cfg.NodeID, got, want)
	}
	return nil
}

// statusOf returns the status m records for id, or 0 when unknown.
func statusOf(m *Membership, id string) Status {
	for _, mem := range m.Members() {
		if mem.ID == id {
			return mem.Status
		}
	}
	return 0
}

func nodeIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("n%02d", i+1)
	}
	return ids
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), scaled(d))
	t.Cleanup(cancel)
	return ctx
}
