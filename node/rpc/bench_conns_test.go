//go:build unix

package rpc

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkRPCOneInFlight is the shape of `concord bench write`: 64
// connections, each with one call in flight at a time, to a handler that
// grows its stack (as the MAP handlers do on their way through Raft and
// gRPC) and waits a little (as a write waits for its commit). Between two
// calls each connection is idle, so the old reader hopped to a fresh
// goroutine and started a writer goroutine for every reply. cpu-us/call is
// the process's user+sys CPU per call, the client side included (the same
// for every variant); linger=0 is the hop on every call (as before
// ReaderLinger), beside the default.
func BenchmarkRPCOneInFlight(b *testing.B) {
	for _, linger := range []time.Duration{0, DefaultConfig().ReaderLinger} {
		b.Run(fmt.Sprintf("linger=%v", linger), func(b *testing.B) { benchOneInFlight(b, linger) })
	}
}

func benchOneInFlight(b *testing.B, linger time.Duration) {
	const conns = 64
	cfg := DefaultConfig()
	cfg.ReaderLinger = linger
	h := newTestHandler()
	h.onHandle = func(_ context.Context, _ *Conn, req *Request) (any, error, bool) {
		if req.Method != "work" {
			return nil, nil, false
		}
		time.Sleep(200 * time.Microsecond)
		return deepStack(24), nil, true
	}
	go func() { // testHandler reports each new connection; nobody here needs them
		for range h.conns {
		}
	}()
	s, err := NewServer(cfg, h)
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(s)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		hs.Close()
		close(h.conns)
	}()
	clients := make([]*Conn, conns)
	for i := range clients {
		cli, err := Dial(context.Background(), "ws"+strings.TrimPrefix(hs.URL, "http"), DefaultClientConfig(), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = cli.Close("bench done"); <-cli.Done() }()
		clients[i] = cli
	}
	b.ReportAllocs()
	b.ResetTimer()
	spread(b, conns, "call", func(w int) error {
		_, err := clients[w].Call(context.Background(), "work", payload256)
		return err
	})
}

// spread runs op b.N times in all on workers goroutines (op gets its
// worker's number), stops at the first error, and reports the process's
// user+sys CPU per op (cpu-us/<unit>) and the rate (<unit>s/s).
func spread(b *testing.B, workers int, unit string, op func(worker int) error) {
	cpu0, start := cpuTime(), time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := op(w); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/"+unit)
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), unit+"s/s")
}

// deepStack uses about n KiB of stack and returns a small value from it.
//
//go:noinline
func deepStack(n int) int {
	var pad [1024]byte
	pad[n%len(pad)] = byte(n)
	if n == 0 {
		return int(pad[0])
	}
	return deepStack(n-1) + int(pad[n%len(pad)])
}

// cpuTime is the process's user+sys CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWSConnects is the shape of `concord bench sessions`: 64
// dialers each open a WebSocket and wait for the answer to its first
// message, to a handler that goes as deep as map/connect (through Raft's
// forward and gRPC) and waits as long as a forwarded commit on loopback;
// every connection then stays open, idle, until the end. cpu-us/connect is
// the process's user+sys CPU per connect, the client side included (the
// same for every build compared).
func BenchmarkWSConnects(b *testing.B) {
	const dialers = 64
	h := connectHandler{}
	s, err := NewServer(DefaultConfig(), h)
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(s)
	url := "ws" + strings.TrimPrefix(hs.URL, "http")
	clients := make([]*Conn, 0, b.N)
	var mu sync.Mutex
	defer func() {
		for _, cli := range clients {
			_ = cli.Close("bench done")
		}
		for _, cli := range clients {
			<-cli.Done()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		hs.Close()
	}()
	b.ReportAllocs()
	b.ResetTimer()
	spread(b, dialers, "connect", func(int) error {
		cli, err := Dial(context.Background(), url, DefaultClientConfig(), nil)
		if err != nil {
			return err
		}
		mu.Lock()
		clients = append(clients, cli)
		mu.Unlock()
		_, err = cli.Call(context.Background(), "connect", payload256)
		return err
	})
}

// connectHandler answers "connect" as BenchmarkWSConnects describes.
type connectHandler struct{}

func (connectHandler) Handle(_ context.Context, c *Conn, req *Request) (any, error) {
	time.Sleep(300 * time.Microsecond)
	c.Authenticated() // as map/connect: the pre-auth slot is free again
	return deepStack(14), nil
}

func (connectHandler) Closed(*Conn) {}
