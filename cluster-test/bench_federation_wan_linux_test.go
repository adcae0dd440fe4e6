package clustertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/concordmap/concord/cluster-test/wannet"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
)

// wanDelay is the benchmarks' one-way delay: 25 ms each way, no jitter
// and no loss, so the figures measure the system rather than the dice.
const wanDelay = 25 * time.Millisecond

// BenchmarkFederation_WAN: two systems of three real processes (TLS on),
// each in its own network namespace, joined by an emulated link with 25 ms
// delay each way and linked with the CLI (cluster-test/wannet).
//
//   - request-reply: alice (dc1) sends to dc2:agent:bob, bob answers each
//     message with a map/send back carrying its correlationId, alice waits
//     for the answer; p50/p99 over wanRounds rounds, beside the injected
//     RTT (50 ms; target: p50 within 1 ms of it), a raw TCP echo across the
//     same link (the emulated wire and the kernels' TCP, no Concord), and
//     the same request/reply between two agents of dc1 on different nodes
//     (what the systems add at each end), and the same cross-system
//     request/reply over the link with its delay removed (the references
//     take wanRounds rounds too, whatever -benchtime).
//   - drain-after-30s-cut: 1,000 msgs/s (256 B) offered from dc1 to dc2,
//     the link blackholed for 30 s and restored: the backlog at restore,
//     the time to the first drained message (the stream's reconnect), the
//     drain rate, and a check that every message answered delivered or
//     queued arrived, once, in each sender's order.
//
// It ignores b.N: one run is the fixed rounds.
func BenchmarkFederation_WAN(b *testing.B) {
	w := StartWAN(b, 3, wannet.Shape{Delay: wanDelay}, "dc1", "dc2")
	dc1, dc2 := w.System("dc1"), w.System("dc2")
	w.Peer(b, "dc1", "dc2", "--export", "all", "--buffer-messages", "200000", "--buffer-bytes", strconv.Itoa(256<<20))
	Eventually(b, ConvergeTimeout, func() error {
		if err := dc1.LinkUp(dc2); err != nil {
			return err
		}
		return dc2.LinkUp(dc1)
	})
	link := w.Link("dc1", "dc2")
	b.Run(fmt.Sprintf("request-reply/dc1-to-dc2/rounds=%d", wanRounds), func(b *testing.B) {
		alice, bob := wanAgent(b, dc1, 0, "alice"), wanAgent(b, dc2, 0, "bob")
		sent0 := directSent(b, dc1, 0, "dc2") + directSent(b, dc2, 0, "dc1")
		link.StartRecording(wanRecordLimit)
		rs := requestReply(b, alice, "dc2:agent:bob", bob, "dc1:agent:alice", fixedRounds())
		reportRTT(b, latencies(rs))
		reportLegs(b, rs, link.StopRecording(), dc1.Namespace().Name, dc2.Namespace().Name)
		b.ReportMetric(float64(directSent(b, dc1, 0, "dc2")+directSent(b, dc2, 0, "dc1")-sent0), "direct-msgs")
	})
	b.Run(fmt.Sprintf("request-reply/dc1-to-dc2/fewest-relays/rounds=%d", wanRounds), func(b *testing.B) {
		// The agents sit on the servers the streams connect (where the
		// hash spread allows): what the relay inside each system costs.
		a, bb, relays := fewestRelays(b, dc1, dc2)
		b.Logf("alice on %s, bob on %s: %d relay hop(s) per round trip", dc1.Proc(a), dc2.Proc(bb), relays)
		alice, bob := wanAgent(b, dc1, a, "alice2"), wanAgent(b, dc2, bb, "bob2")
		link.StartRecording(wanRecordLimit)
		rs := requestReply(b, alice, "dc2:agent:bob2", bob, "dc1:agent:alice2", fixedRounds())
		reportRTT(b, latencies(rs))
		reportLegs(b, rs, link.StopRecording(), dc1.Namespace().Name, dc2.Namespace().Name)
		b.ReportMetric(float64(relays), "relay-hops")
	})
	b.Run(fmt.Sprintf("baseline-tcp-echo/dc1-to-dc2/rounds=%d", wanRounds), func(b *testing.B) {
		link.StartRecording(wanRecordLimit)
		reportRTT(b, tcpEcho(b, dc1.Namespace(), dc2.Namespace()))
		reportWire(b, link.StopRecording())
	})
	b.Run("reference-request-reply/same-system", func(b *testing.B) {
		carol, dave := wanAgent(b, dc1, 0, "carol"), wanAgent(b, dc1, 1, "dave")
		lat := latencies(requestReply(b, carol, `{"agent":"dave"}`, dave, `{"agent":"carol"}`, fixedRounds()))
		p50, p99 := percentiles(lat)
		b.ReportMetric(ms(p50), "p50-ms")
		b.ReportMetric(ms(p99), "p99-ms")
	})
	b.Run("reference-request-reply/dc1-to-dc2/no-delay", func(b *testing.B) {
		// The same link without its delay: what the federation path
		// itself costs when the processes never idle between packets.
		w.Link("dc1", "dc2").SetShape(wannet.Shape{})
		defer w.Link("dc1", "dc2").SetShape(wannet.Shape{Delay: wanDelay})
		a, bb, _ := fewestRelays(b, dc1, dc2)
		alice, bob := wanAgent(b, dc1, a, "alice3"), wanAgent(b, dc2, bb, "bob3")
		lat := latencies(requestReply(b, alice, "dc2:agent:bob3", bob, "dc1:agent:alice3", fixedRounds()))
		p50, p99 := percentiles(lat)
		b.ReportMetric(ms(p50), "p50-ms")
		b.ReportMetric(ms(p99), "p99-ms")
	})
	b.Run("drain-after-30s-cut/offered=1000msgs-per-s", func(b *testing.B) {
		benchDrain(b, w, dc1, dc2, 30*time.Second, 1000)
	})
}

// fewestRelays picks a dc1 process a and a dc2 process b such that the
// request (a's stream to dc2) and the reply (b's stream to dc1) cross as
// few relay hops inside the systems as the streams' spread allows.
func fewestRelays(b *testing.B, dc1, dc2 *ProcCluster) (a, bb, relays int) {
	return placeAgents(b, dc1, dc2, false)
}

// placeAgents picks a dc1 process a and a dc2 process b whose streams to
// each other's system (a's request, b's reply) land on servers other than
// the target agent's as rarely as possible, or (most) as often: the relay
// hops a round trip takes when every message rides the main streams.
func placeAgents(b *testing.B, dc1, dc2 *ProcCluster, most bool) (a, bb, relays int) {
	b.Helper()
	relays = -1
	for _, pa := range dc1.Procs() {
		for _, pb := range dc2.Procs() {
			ha, err := dc1.StreamTo(pa.Index, dc2)
			if err != nil {
				b.Fatal(err)
			}
			hb, err := dc2.StreamTo(pb.Index, dc1)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			if ha != pb {
				n++
			}
			if hb != pa {
				n++
			}
			if relays < 0 || (most && n > relays) || (!most && n < relays) {
				a, bb, relays = pa.Index, pb.Index, n
			}
		}
	}
	return a, bb, relays
}

// wanRounds is how many request/reply rounds each WAN figure takes.
const wanRounds = 200

// reportRTT reports p50/p99 of lat and the p50's distance from the
// injected round trip (2 x wanDelay).
func reportRTT(b *testing.B, lat []time.Duration) {
	p50, p99 := percentiles(lat)
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(p99), "p99-ms")
	b.ReportMetric(ms(p50-2*wanDelay), "p50-minus-injected-rtt-ms")
}

// wanAgent connects agent id to process i of pc from inside its namespace
// (no forwarder hop), with the system's token.
func wanAgent(b *testing.B, pc *ProcCluster, i int, id string) *websocket.Conn {
	b.Helper()
	d := *websocket.DefaultDialer
	d.TLSClientConfig = tlstest.ClientTLS(pc.SystemID(), "")
	d.NetDialContext = pc.Namespace().DialContext
	ws, _, err := d.Dial("wss://"+pc.Proc(i).InnerHTTPAddr+"/map", nil)
	if err != nil {
		b.Fatalf("dial %s: %v", pc.Proc(i), err)
	}
	b.Cleanup(func() { _ = ws.Close() })
	return connectRaw(b, ws, id, nil, pc.Token())
}

// mapNote is the part of a map/message notification the benchmarks read.
type mapNote struct {
	Method string `json:"method"`
	Params struct {
		Message struct {
			ID      string          `json:"id"`
			Payload json.RawMessage `json:"payload"`
		} `json:"message"`
	} `json:"params"`
}

// rrRound is one request/reply as the test process saw it: when the
// request was written, when the responder read it and wrote its answer,
// and when the answer arrived (all on this process's clock).
type rrRound struct {
	sent, heard, answered, replied time.Time
}

// latencies is each round's send-to-answer time.
func latencies(rs []rrRound) []time.Duration {
	out := make([]time.Duration, len(rs))
	for i, r := range rs {
		out[i] = r.answered.Sub(r.sent)
	}
	return out
}

// requestReply runs request/replies while more says so (after warm-up
// rounds that also wait for the directory import): from sends to `to`,
// responder answers each to replyTo with the request's correlationId, and
// each round's times are recorded.
func requestReply(b *testing.B, from *websocket.Conn, to string, responder *websocket.Conn, replyTo string, more func() bool) []rrRound {
	b.Helper()
	var mu sync.Mutex // guards heard: the responder's times per round
	heard := map[int][2]time.Time{}
	done := make(chan struct{})
	go func() { // the responder: answers until its socket closes
		defer close(done)
		id := 100
		for {
			_, data, err := responder.ReadMessage()
			if err != nil {
				return
			}
			at := time.Now()
			var n mapNote
			if json.Unmarshal(data, &n) != nil || n.Method != "map/message" {
				continue
			}
			var p struct{ Seq int }
			if json.Unmarshal(n.Params.Message.Payload, &p) != nil {
				continue
			}
			id++
			reply := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"map/send","params":{"to":%s,"payload":{"re":%d},"meta":{"correlationId":%q}}}`,
				id, quoteAddr(replyTo), p.Seq, n.Params.Message.ID)
			mu.Lock()
			heard[p.Seq] = [2]time.Time{at, time.Now()}
			mu.Unlock()
			if responder.WriteMessage(websocket.TextMessage, []byte(reply)) != nil {
				return
			}
		}
	}()
	b.Cleanup(func() { _ = responder.Close(); <-done })
	round := 0
	// one runs rounds until one is answered (the first ones may fail
	// until the directory import lands) and returns its times.
	one := func() rrRound {
		for tries := 0; ; tries++ {
			if tries > 100 {
				b.Fatalf("round %d: no answer in %d tries", round, tries)
			}
			round++
			start := time.Now()
			frame := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"map/send","params":{"to":%s,"payload":{"seq":%d,"pad":%s},"meta":{"expectsResponse":true}}}`,
				round, quoteAddr(to), round, benchPayload256)
			if err := from.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
				b.Fatal(err)
			}
			if answered(b, from, round) {
				r := rrRound{sent: start, answered: time.Now()}
				mu.Lock()
				r.heard, r.replied = heard[round][0], heard[round][1]
				mu.Unlock()
				return r
			}
		}
	}
	for range 10 { // warm-up
		one()
	}
	var rs []rrRound
	for more() {
		rs = append(rs, one())
	}
	return rs
}

// fixedRounds is requestReply's more for wanRounds rounds, whatever b.N.
func fixedRounds() func() bool {
	n := 0
	return func() bool { n++; return n <= wanRounds }
}

// answered reads from until the answer to round arrives (true) or the
// send to it failed (false: a warm-up round before the import, say).
func answered(b *testing.B, from *websocket.Conn, round int) bool {
	errMark := []byte(fmt.Sprintf(`"id":%d,"error"`, round))
	for {
		_ = from.SetReadDeadline(time.Now().Add(DeliveryTimeout))
		_, data, err := from.ReadMessage()
		if err != nil {
			b.Fatalf("round %d: %v", round, err)
		}
		if bytes.Contains(data, errMark) {
			time.Sleep(50 * time.Millisecond) // let the directory import land
			return false
		}
		var n mapNote
		if json.Unmarshal(data, &n) != nil || n.Method != "map/message" {
			continue
		}
		var p struct {
			Re *int `json:"re"`
		}
		if json.Unmarshal(n.Params.Message.Payload, &p) == nil && p.Re != nil && *p.Re == round {
			return true
		}
	}
}

// quoteAddr renders a MAP address: JSON objects as they are, strings
// quoted.
func quoteAddr(a string) string {
	if len(a) > 0 && a[0] == '{' {
		return a
	}
	return strconv.Quote(a)
}

// tcpEcho times wanRounds 256-byte round trips over a TCP connection from
// namespace a to an echo server in namespace b.
func tcpEcho(b *testing.B, a, bns *wannet.Namespace) []time.Duration {
	b.Helper()
	addr := net.JoinHostPort(bns.IP.String(), "9100")
	ln, err := bns.Listen("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = io.Copy(c, c)
		_ = c.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	c, err := a.DialContext(ctx, "tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Close(); _ = ln.Close(); wg.Wait() }()
	msg := append([]byte(benchPayload256), '\n')
	r := bufio.NewReader(c)
	var lat []time.Duration
	for range wanRounds {
		start := time.Now()
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := r.ReadBytes('\n'); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	return lat
}
