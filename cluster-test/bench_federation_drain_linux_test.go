package clustertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// drainSenders is how many MAP connections carry the offered load: during
// the first seconds of a cut (before the stream notices the silence) each
// send waits for its ack, and one connection holds at most rpc's
// MaxDeferred (1,024) unanswered requests.
const drainSenders = 32

// drainOutcome is what a drain send's answer said.
type drainOutcome int32

const (
	drainPending drainOutcome = iota
	drainMust                 // delivered or queued: it has to arrive
	drainMay                  // 5000 (the link broke before the ack): at most once
	drainFailed               // anything else
)

// drainRun is one drain benchmark's bookkeeping. Sends are numbered by a
// global seq; outcomes and arrivals are indexed by it.
type drainRun struct {
	mu       sync.Mutex
	outcome  []drainOutcome
	arrivals []drainArrival
	failures []string
}

type drainArrival struct {
	seq, src int
	at       time.Time
}

// benchDrain offers rate msgs/s from dc1 to dc2, cuts the link for cut,
// restores it and keeps offering until the backlog is drained, then
// checks and reports (see BenchmarkFederation_WAN).
func benchDrain(b *testing.B, w *WAN, dc1, dc2 *ProcCluster, cut time.Duration, rate int) {
	rx := wanAgent(b, dc2, 0, "drain-rx")
	var senders []*websocket.Conn
	for i := range drainSenders {
		senders = append(senders, wanAgent(b, dc1, 0, fmt.Sprintf("drain-tx-%d", i)))
	}
	run := &drainRun{}
	var readers sync.WaitGroup
	readers.Add(1 + len(senders))
	go func() { defer readers.Done(); run.receive(rx) }()
	for _, s := range senders {
		go func() { defer readers.Done(); run.answers(s) }()
	}
	b.Cleanup(func() {
		_ = rx.Close()
		for _, s := range senders {
			_ = s.Close()
		}
		readers.Wait()
	})

	var offering atomic.Bool
	offering.Store(true)
	offered := make(chan struct{})
	go func() { defer close(offered); run.offer(senders, rate, &offering) }()

	time.Sleep(3 * time.Second) // steady traffic before the cut is the scenario
	w.Link("dc1", "dc2").Cut()
	time.Sleep(cut) // the cut's length is the scenario
	w.Link("dc1", "dc2").Restore()
	restored := time.Now()
	seqAtRestore := run.sent()
	Eventually(b, 2*time.Minute, func() error { return run.caughtUp(seqAtRestore) })
	offering.Store(false)
	<-offered
	Eventually(b, time.Minute, func() error { return run.caughtUp(run.sent()) })
	time.Sleep(time.Second) // a late duplicate would arrive now
	run.report(b, restored, seqAtRestore)
}

// offer sends rate msgs/s round-robin over senders until offering is
// false; each sender has one writer (this goroutine).
func (r *drainRun) offer(senders []*websocket.Conn, rate int, offering *atomic.Bool) {
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		if !offering.Load() {
			return
		}
		due := int(time.Since(start).Seconds() * float64(rate))
		for seq := r.sent(); seq < due; seq++ {
			src := seq % len(senders)
			r.mu.Lock()
			r.outcome = append(r.outcome, drainPending)
			r.mu.Unlock()
			frame := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"map/send","params":{"to":"dc2:agent:drain-rx","payload":{"q":%d,"s":%d,"pad":%s}}}`,
				seq, seq, src, benchPayload256)
			if err := senders[src].WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
				r.fail(fmt.Sprintf("write %d: %v", seq, err))
				return
			}
		}
	}
}

func (r *drainRun) sent() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.outcome)
}

func (r *drainRun) fail(s string) {
	r.mu.Lock()
	r.failures = append(r.failures, s)
	r.mu.Unlock()
}

// answers records the outcome of each send answered on s.
func (r *drainRun) answers(s *websocket.Conn) {
	for {
		_, data, err := s.ReadMessage()
		if err != nil {
			return
		}
		var a struct {
			ID     *int `json:"id"`
			Result *struct {
				Delivered []string `json:"delivered"`
				Queued    []string `json:"queued"`
			} `json:"result"`
			Error *struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(data, &a) != nil || a.ID == nil {
			continue
		}
		o := drainFailed
		switch {
		case a.Result != nil && (len(a.Result.Delivered) == 1 || len(a.Result.Queued) == 1):
			o = drainMust
		case a.Error != nil && a.Error.Code == 5000:
			o = drainMay
		}
		r.mu.Lock()
		if *a.ID < len(r.outcome) {
			r.outcome[*a.ID] = o
		}
		if o == drainFailed {
			r.failures = append(r.failures, string(data))
		}
		r.mu.Unlock()
	}
}

// receive records every drain message rx gets, in arrival order.
func (r *drainRun) receive(rx *websocket.Conn) {
	for {
		_, data, err := rx.ReadMessage()
		if err != nil {
			return
		}
		if !bytes.Contains(data, []byte(`"map/message"`)) {
			continue
		}
		var n mapNote
		var p struct {
			Q, S int
		}
		if json.Unmarshal(data, &n) != nil || json.Unmarshal(n.Params.Message.Payload, &p) != nil {
			continue
		}
		r.mu.Lock()
		r.arrivals = append(r.arrivals, drainArrival{seq: p.Q, src: p.S, at: time.Now()})
		r.mu.Unlock()
	}
}

// caughtUp returns nil once every send below upTo has an answer and
// every one answered delivered or queued has arrived.
func (r *drainRun) caughtUp(upTo int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := make(map[int]bool, len(r.arrivals))
	for _, a := range r.arrivals {
		got[a.seq] = true
	}
	for seq := range upTo {
		switch r.outcome[seq] {
		case drainPending:
			return fmt.Errorf("send %d not answered yet", seq)
		case drainMust:
			if !got[seq] {
				return fmt.Errorf("acknowledged send %d not received yet (%d received)", seq, len(r.arrivals))
			}
		}
	}
	return nil
}

// report checks order and duplicates and reports the drain figures.
func (r *drainRun) report(b *testing.B, restored time.Time, seqAtRestore int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.failures) > 0 {
		b.Fatalf("%d sends failed, first: %s", len(r.failures), r.failures[0])
	}
	last := map[int]int{}
	seen := map[int]bool{}
	var backlog int
	var first, drained time.Time
	for _, a := range r.arrivals {
		if seen[a.seq] {
			b.Fatalf("message %d arrived twice", a.seq)
		}
		seen[a.seq] = true
		if prev, ok := last[a.src]; ok && a.seq <= prev {
			b.Fatalf("sender %d: message %d arrived after %d", a.src, a.seq, prev)
		}
		last[a.src] = a.seq
		if r.outcome[a.seq] == drainFailed || r.outcome[a.seq] == drainPending {
			b.Fatalf("message %d arrived but its send answered %v", a.seq, r.outcome[a.seq])
		}
		if a.at.After(restored) && a.seq < seqAtRestore {
			backlog++
			if first.IsZero() {
				first = a.at
			}
			drained = a.at
		}
	}
	var must, may int
	for _, o := range r.outcome {
		switch o {
		case drainMust:
			must++
		case drainMay:
			may++
		}
	}
	b.ReportMetric(float64(len(r.outcome)), "offered")
	b.ReportMetric(float64(must), "acked-or-queued")
	b.ReportMetric(float64(may), "unknown-5000")
	b.ReportMetric(float64(backlog), "backlog-at-restore")
	if backlog > 0 {
		b.ReportMetric(first.Sub(restored).Seconds(), "reconnect-s")
		b.ReportMetric(drained.Sub(first).Seconds(), "drain-s")
		b.ReportMetric(float64(backlog)/max(drained.Sub(first).Seconds(), 1e-3), "drain-msgs/s")
	}
	b.Logf("offered %d (%d delivered or queued, %d unknown), backlog at restore %d: first drained %v after restore, drained in %v; order per sender and exactly-once hold",
		len(r.outcome), must, may, backlog, first.Sub(restored).Round(time.Millisecond), drained.Sub(first).Round(time.Millisecond))
}
