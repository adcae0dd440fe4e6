package node_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/rpc"
)

// sessionCost is what n idle connections add to the process: heap and
// goroutine stacks in use after a GC, and goroutines, per connection. The
// clients live in the same process, so every measurement uses the same raw
// gorilla client and only the server side differs.
type sessionCost struct {
	bytes      float64
	goroutines float64
}

func (c sessionCost) String() string {
	return fmt.Sprintf("%.0f B and %.2f goroutines per connection", c.bytes, c.goroutines)
}

func inUse() (uint64, int) {
	runtime.GC()
	runtime.GC() // a second cycle shrinks the stacks the first one found idle
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse, runtime.NumGoroutine()
}

// measureIdle opens n connections with open (which must leave each one
// idle and return it) and reports their cost with all of them open.
func measureIdle(t testing.TB, n int, open func() *websocket.Conn) sessionCost {
	t.Helper()
	conns := make([]*websocket.Conn, 0, n)
	defer func() {
		for _, ws := range conns {
			_ = ws.Close()
		}
	}()
	bytes0, gs0 := inUse()
	for range n {
		conns = append(conns, open())
	}
	// Measured once the last connections settled into idle reads (their
	// handshakes done, their readers' lingers over): two readings a
	// linger apart agree on the goroutines. A fixed 200 ms was shorter
	// than the default ReaderLinger (250 ms) and than a loaded machine's
	// handshakes.
	settle := rpc.DefaultConfig().ReaderLinger + 50*time.Millisecond
	time.Sleep(settle)
	bytes1, gs1 := inUse()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(settle)
		b, gs := inUse()
		stable := gs == gs1
		bytes1, gs1 = b, gs
		if stable {
			break
		}
	}
	return sessionCost{
		bytes:      (float64(bytes1) - float64(bytes0)) / float64(n),
		goroutines: float64(gs1-gs0) / float64(n),
	}
}

// idleSessionCosts measures, in one run, n idle MAP sessions on a dev node
// (map/connect done, nothing else) and n idle connections to a bare
// gorilla/websocket server whose handler only blocks in ReadMessage.
func idleSessionCosts(t testing.TB, n int) (session, baseline sessionCost) {
	t.Helper()
	up := websocket.Upgrader{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				return
			}
		}
	}))
	rawURL := "ws" + strings.TrimPrefix(hs.URL, "http")
	baseline = measureIdle(t, n, func() *websocket.Conn {
		ws, _, err := websocket.DefaultDialer.Dial(rawURL, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ws
	})
	hs.CloseClientConnections()
	hs.Close()

	cfg := node.DevConfig(t.TempDir())
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.MAP.AnonymousSessionRate = 0 // n anonymous sessions from one address, at once
	srv, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	connect := []byte(`{"jsonrpc":"2.0","id":1,"method":"map/connect","params":{"protocolVersion":1,"participantType":"client"}}`)
	session = measureIdle(t, n, func() *websocket.Conn {
		ws, _, err := websocket.DefaultDialer.Dial(srv.MAPURL(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ws.WriteMessage(websocket.TextMessage, connect); err != nil {
			t.Fatal(err)
		}
		if _, data, err := ws.ReadMessage(); err != nil || !strings.Contains(string(data), `"sessionId"`) {
			t.Fatalf("map/connect: %s %v", data, err)
		}
		return ws
	})
	return session, baseline
}

// TestIdleSessions_CostPerSession bounds what an idle MAP session costs a
// node beside a bare idle gorilla connection measured in the same run:
// 10,000 idle sessions must fit in 150 MB of RSS (issue 10), which leaves
// well under 12 KB of heap and stacks per session once GC headroom is
// counted. The printed figures are the before/after table of
// node/rpc/doc.go.
func TestIdleSessions_CostPerSession(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 1000 connections")
	}
	session, baseline := idleSessionCosts(t, 1000)
	t.Logf("idle MAP session: %v; bare gorilla connection (baseline, same run): %v", session, baseline)
	if session.goroutines > 1.05 {
		t.Errorf("an idle session keeps %.2f goroutines, want 1 (the reader)", session.goroutines)
	}
	if limit := baseline.bytes + 6<<10; session.bytes > limit {
		t.Errorf("an idle session costs %.0f B, want at most the baseline + 6 KiB = %.0f B", session.bytes, limit)
	}
}
