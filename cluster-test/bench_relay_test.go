package clustertest

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// BenchmarkRouting_CrossNodePairs: 16 pairs of agents, senders on node 1,
// receivers on node 2, each sender pipelining 256-byte map/send frames
// (issue 10's load), beside the baseline measured in the same run with
// the same clients and frames: a do-nothing Go WebSocket relay (gorilla,
// one goroutine per socket) that writes each frame a sender sends, as is,
// to its pair's receiver. The target is map-send >= 0.5x the relay.
func BenchmarkRouting_CrossNodePairs(b *testing.B) {
	const pairs = 16
	b.Run(fmt.Sprintf("map-send/pairs=%d/node1-to-node2/no-tls", pairs), func(b *testing.B) {
		// Plaintext, as the relay: the comparison is of the routing.
		c := New(b, 2, WithLogLevel(slog.LevelWarn), WithInsecure())
		drivePairs(b, crossNodePairs(b, c, pairs), []byte(`"map/message"`))
	})
	b.Run(fmt.Sprintf("baseline-ws-relay/pairs=%d", pairs), func(b *testing.B) {
		url := startRelay(b)
		ps := make([]benchPair, pairs)
		for i := range ps {
			ps[i] = benchPair{cork: &corkedConn{}}
			ps[i].dst = rawDial(b, fmt.Sprintf("%s?pair=%d&side=dst", url, i), nil)
			ps[i].src = rawDial(b, fmt.Sprintf("%s?pair=%d&side=src", url, i), ps[i].cork)
			ps[i].cork.cork()
			ps[i].frame = []byte(`{"jsonrpc":"2.0","id":7,"method":"map/send","params":{"to":{"agent":"dst` + fmt.Sprint(i) + `"},"payload":` + benchPayload256 + `}}`)
		}
		drivePairs(b, ps, nil)
	})
}

// crossNodePairs connects n sender agents to node 1 of c and their
// receivers to node 2, and waits until the nodes agree on them.
func crossNodePairs(b *testing.B, c *Cluster, n int) []benchPair {
	ps := make([]benchPair, n)
	for i := range ps {
		dst := fmt.Sprintf("dst%d", i)
		ps[i] = benchPair{cork: &corkedConn{}}
		ps[i].dst = rawAgent(b, c.Nodes()[1].MAPURL(), dst, nil)
		ps[i].src = rawAgent(b, c.Nodes()[0].MAPURL(), fmt.Sprintf("src%d", i), ps[i].cork)
		ps[i].frame = []byte(`{"jsonrpc":"2.0","id":7,"method":"map/send","params":{"to":{"agent":"` + dst + `"},"payload":` + benchPayload256 + `}}`)
		ps[i].reply = []byte(`"delivered":["` + dst + `"]`)
	}
	c.RequireConverged(b)
	return ps
}

// benchPair is one sender socket and its receiver. reply, when set, is what
// every answer on src must contain (the node answers each map/send).
type benchPair struct {
	src, dst *websocket.Conn
	cork     *corkedConn
	frame    []byte
	reply    []byte
}

// drivePairs sends b.N frames spread over the pairs, each sender keeping at
// most benchWindow frames in flight (sent, not yet received) and coalescing
// its writes as benchMAPSend does, and reports msgs/s received. want, when
// set, is what a received frame must contain to count.
func drivePairs(b *testing.B, ps []benchPair, want []byte) {
	b.ResetTimer()
	r := runPairs(b, ps, want, b.N)
	b.ReportMetric(r.rate, "msgs/s")
	// CPU per message (nodes, relay and clients together: one process) is
	// steadier than msgs/s on a machine shared with other work.
	b.ReportMetric(r.cpuPerMsg, "cpu-ns/msg")
	reportFailures(b, r.failed)
}

// pairResult is one runPairs: msgs/s received, the process's CPU ns per
// message, and answers that lacked the pair's reply marker.
type pairResult struct {
	rate, cpuPerMsg float64
	failed          int64
}

// runPairs is drivePairs' load for n frames, measured; the pairs' sockets
// can carry several runs one after the other.
func runPairs(b *testing.B, ps []benchPair, want []byte, n int) pairResult {
	var received, failed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 3*len(ps))
	per := (n + len(ps) - 1) / len(ps)
	cpu0 := processCPU()
	start := time.Now()
	for i := range ps {
		p := &ps[i]
		var got atomic.Int64
		progress := make(chan struct{}, 1)
		wg.Add(2)
		go func() { // receiver
			defer wg.Done()
			for got.Load() < int64(per) {
				_ = p.dst.SetReadDeadline(time.Now().Add(DeliveryTimeout))
				_, data, err := p.dst.ReadMessage()
				if err != nil {
					errs <- fmt.Errorf("receiver %d after %d: %w", i, got.Load(), err)
					return
				}
				if want != nil && !bytes.Contains(data, want) {
					continue
				}
				got.Add(1)
				received.Add(1)
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}()
		if p.reply != nil {
			wg.Add(1)
			go func() { // answers to the sender
				defer wg.Done()
				for n := 0; n < per; n++ {
					_ = p.src.SetReadDeadline(time.Now().Add(DeliveryTimeout))
					_, data, err := p.src.ReadMessage()
					if err != nil {
						errs <- fmt.Errorf("sender %d replies after %d: %w", i, n, err)
						return
					}
					if !bytes.Contains(data, p.reply) {
						failed.Add(1)
					}
				}
			}()
		}
		go func() { // sender
			defer wg.Done()
			for sent := range per {
				if sent%benchFlushEvery == 0 {
					p.cork.flush(b)
				}
				for int64(sent)-got.Load() >= benchWindow {
					p.cork.flush(b)
					select {
					case <-progress:
					case <-time.After(DeliveryTimeout):
						errs <- fmt.Errorf("sender %d: no progress at %d sent, %d received", i, sent, got.Load())
						return
					}
				}
				if err := p.src.WriteMessage(websocket.TextMessage, p.frame); err != nil {
					errs <- err
					return
				}
			}
			p.cork.flush(b)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return pairResult{
		rate:      float64(received.Load()) / time.Since(start).Seconds(),
		cpuPerMsg: float64((processCPU() - cpu0).Nanoseconds()) / float64(received.Load()),
		failed:    failed.Load(),
	}
}

// processCPU is the user+system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rawDial connects a raw WebSocket client, its writes through cork when set
// (corked by the caller).
func rawDial(b *testing.B, url string, cork *corkedConn) *websocket.Conn {
	b.Helper()
	dialer := corkedDialer(cork)
	ws, _, err := dialer.Dial(url, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ws.Close() })
	return ws
}

// startRelay serves the do-nothing relay: a socket with side=dst registers
// as pair's receiver; every frame read on side=src is written, unchanged,
// to that receiver.
func startRelay(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	dsts := map[string]chan *websocket.Conn{} // pair -> its receiver, once connected
	dstOf := func(pair string) chan *websocket.Conn {
		mu.Lock()
		defer mu.Unlock()
		if dsts[pair] == nil {
			dsts[pair] = make(chan *websocket.Conn, 1)
		}
		return dsts[pair]
	}
	up := websocket.Upgrader{}
	var conns sync.WaitGroup
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		conns.Add(1)
		defer conns.Done()
		defer ws.Close()
		pair := r.URL.Query().Get("pair")
		if r.URL.Query().Get("side") == "dst" {
			dstOf(pair) <- ws
			for {
				if _, _, err := ws.ReadMessage(); err != nil {
					return
				}
			}
		}
		var dst *websocket.Conn
		select {
		case dst = <-dstOf(pair): // the receiver connects first; its handler may still be starting
		case <-time.After(DeliveryTimeout):
			return
		}
		for {
			mt, data, err := ws.ReadMessage()
			if err != nil || dst.WriteMessage(mt, data) != nil {
				return
			}
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() {
		_ = srv.Close() // hijacked sockets are the clients' to close (rawDial's cleanup)
		conns.Wait()
	})
	return "ws://" + strings.TrimPrefix(ln.Addr().String(), "ws://") + "/relay"
}
