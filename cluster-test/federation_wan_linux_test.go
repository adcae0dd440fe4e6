package clustertest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/node/rpc"
)

// wanPair starts dc1 and dc2 (3 processes each, TLS on) in their own
// namespaces over WANShape and links them with the CLI, both exporting
// everything, with an outage buffer large enough for the test's traffic.
func wanPair(t *testing.T) (w *WAN, dc1, dc2 *ProcCluster) {
	t.Helper()
	w = StartWAN(t, 3, WANShape, "dc1", "dc2")
	dc1, dc2 = w.System("dc1"), w.System("dc2")
	w.Peer(t, "dc1", "dc2", "--export", "all", "--buffer-messages", "100000")
	Eventually(t, ConvergeTimeout, func() error {
		if err := dc1.LinkUp(dc2); err != nil {
			return err
		}
		return dc2.LinkUp(dc1)
	})
	return w, dc1, dc2
}

// TestWAN_FederationOverLossyLink runs two systems of real processes in
// separate network namespaces joined by a 25 ms (each way), jittery,
// lossy link, linked with `concord federation token|link` over mTLS:
// messages go both ways; the stream-holding server is kill -9'd on each
// side while numbered streams flow both ways; then the link is cut
// (blackholed) mid-traffic and restored: what was queued drains in order,
// nothing acknowledged is lost, nothing arrives twice, and local sends in
// each system stay local-sized during the cut.
func TestWAN_FederationOverLossyLink(t *testing.T) {
	w, dc1, dc2 := wanPair(t)

	// Place alice (dc1) and bob (dc2) so that neither sits on the server
	// the other's node streams to: both stream holders can be killed.
	a, b := streamPlacement(t, dc1, dc2)
	alice := agentOn(t, dc1, a, "alice", nil)
	bob := agentOn(t, dc2, b, "bob", nil)
	sendDelivered(t, alice, "dc2:agent:bob", map[string]any{"hello": "bob"})
	sendDelivered(t, bob, "dc1:agent:alice", map[string]any{"hello": "alice"})
	if msgs, err := bob.WaitMessages(1, DeliveryTimeout); err != nil || msgs[0].From != "dc1:agent:alice" {
		t.Fatalf("bob's first message: %+v %v (want from dc1:agent:alice)", msgs, err)
	}

	ab := startSeqStream(alice, "dc2:agent:bob", bob, "a2b")
	ba := startSeqStream(bob, "dc1:agent:alice", alice, "b2a")
	ab.waitSent(t, 10)

	// kill -9 the dc2 server alice's node streams to, then the dc1 server
	// bob's node streams to: each stream moves and the traffic goes on.
	for _, k := range []struct {
		from, peer *ProcCluster
		at         int
		s          *seqStream
	}{{dc1, dc2, a, ab}, {dc2, dc1, b, ba}} {
		holder, err := k.from.StreamTo(k.at, k.peer)
		if err != nil {
			t.Fatal(err)
		}
		k.peer.Kill9(t, holder.Index)
		t.Logf("killed %s/%s, which %s/%s streamed to", k.peer.SystemID(), holder, k.from.SystemID(), k.from.Proc(k.at))
		Eventually(t, ConvergeTimeout, func() error {
			now, err := k.from.StreamTo(k.at, k.peer)
			if err == nil && now == holder {
				return errors.New("stream still on the killed server")
			}
			return err
		})
		k.s.waitMust(t, k.s.mustCount()+5)
	}

	// Cut the link mid-traffic: local work in both systems stays fast
	// while the streams notice the silence and start queueing.
	before := localLatencies(t, dc1, a, 10)
	w.Link("dc1", "dc2").Cut()
	cutAt := time.Now()
	local1 := localLatencies(t, dc1, a, 20)
	local2 := localLatencies(t, dc2, b, 20)
	Eventually(t, 2*ConvergeTimeout, func() error {
		if _, err := dc1.StreamTo(a, dc2); err == nil {
			return errors.New("dc1's stream to dc2 still up")
		}
		if _, err := dc2.StreamTo(b, dc1); err == nil {
			return errors.New("dc2's stream to dc1 still up")
		}
		return nil
	})
	detected := time.Since(cutAt)
	q1, q2 := ab.queuedCount(), ba.queuedCount()
	Eventually(t, ConvergeTimeout, func() error {
		if ab.queuedCount() < q1+10 || ba.queuedCount() < q2+10 {
			return errors.New("waiting for sends queued during the cut")
		}
		return nil
	})
	w.Link("dc1", "dc2").Restore()
	t.Logf("link cut for %v (streams down after %v); local send p50/max before %v/%v, during the cut dc1 %v/%v, dc2 %v/%v",
		time.Since(cutAt).Round(time.Millisecond), detected.Round(time.Millisecond),
		p50(before), slices.Max(before), p50(local1), slices.Max(local1), p50(local2), slices.Max(local2))
	for _, d := range [][]time.Duration{local1, local2} {
		if m := slices.Max(d); m > localBound(before) {
			t.Errorf("a local send took %v during the cut (before it: max %v)", m, slices.Max(before))
		}
	}
	Eventually(t, ConvergeTimeout, func() error {
		if err := dc1.LinkUp(dc2); err != nil {
			return err
		}
		return dc2.LinkUp(dc1)
	})
	ab.waitMust(t, ab.mustCount()+5)
	ba.waitMust(t, ba.mustCount()+5)
	ab.stopAndVerify(t)
	ba.stopAndVerify(t)
}

// streamPlacement picks a dc1 process a and a dc2 process b such that
// a's stream to dc2 is not on b and b's stream to dc1 is not on a.
func streamPlacement(t *testing.T, dc1, dc2 *ProcCluster) (a, b int) {
	t.Helper()
	for _, pa := range dc1.Procs() {
		ha, err := dc1.StreamTo(pa.Index, dc2)
		if err != nil {
			t.Fatal(err)
		}
		for _, pb := range dc2.Procs() {
			hb, err := dc2.StreamTo(pb.Index, dc1)
			if err != nil {
				t.Fatal(err)
			}
			if ha != pb && hb != pa {
				return pa.Index, pb.Index
			}
		}
	}
	t.Fatal("every pair of processes holds the other's stream")
	return 0, 0
}

// localLatencies sends n messages between two agents of one system on
// different processes (the first on process at) and returns each send's
// latency.
func localLatencies(t *testing.T, pc *ProcCluster, at, n int) []time.Duration {
	t.Helper()
	other := (at + 1) % 3
	for !pc.Proc(other).Running() || other == at {
		other = (other + 1) % 3
	}
	tag := fmt.Sprintf("%d", time.Now().UnixNano())
	src := agentOn(t, pc, at, "local-src-"+tag, nil)
	dst := agentOn(t, pc, other, "local-dst-"+tag, nil)
	sendDelivered(t, src, "local-dst-"+tag, "warm-up") // the sender's node may not know dst yet
	var out []time.Duration
	for i := range n {
		start := time.Now()
		res, err := src.Send(map[string]any{"to": "local-dst-" + tag, "payload": i})
		if err != nil || len(res.Delivered) != 1 {
			t.Fatalf("local send %d in %s: %+v %s", i, pc.SystemID(), res, Describe(err))
		}
		out = append(out, time.Since(start))
	}
	if _, err := dst.WaitMessages(n+1, DeliveryTimeout); err != nil {
		t.Fatal(err)
	}
	src.Close()
	dst.Close()
	return out
}

// localBound is how slow a local send may get during a cut: ten times the
// slowest before it, at least 1 s (scaled) for a loaded CI machine; far
// below the link's 10-15 s timeouts that a send blocked by it would show.
func localBound(before []time.Duration) time.Duration {
	return max(10*slices.Max(before), scaled(time.Second))
}

func p50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// seqStream sends numbered messages from one agent to another, one at a
// time (each waits for its answer), until stopped. An answer of delivered
// or queued makes the number a must (it has to arrive); 5000 or a client
// timeout (outcome unknown: the link broke before the ack) a may (it
// arrives at most once); anything else is an error.
type seqStream struct {
	from *Client
	to   string
	rx   *Client
	name string

	mu      sync.Mutex
	must    []int
	may     []int
	queued  int
	errs    []string
	next    int
	stopped chan struct{}
	done    chan struct{}
}

// seqPace spaces a stream's sends: with queueing, a send answers at once,
// and an unpaced sender would only measure the buffer's size.
const seqPace = 20 * time.Millisecond

func startSeqStream(from *Client, to string, rx *Client, name string) *seqStream {
	s := &seqStream{from: from, to: to, rx: rx, name: name, stopped: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *seqStream) run() {
	defer close(s.done)
	for {
		select {
		case <-s.stopped:
			return
		case <-time.After(seqPace):
		}
		n := s.next
		s.next++
		res, err := s.from.Send(map[string]any{"to": s.to, "payload": map[string]any{"stream": s.name, "seq": n}})
		var re *rpc.Error
		s.mu.Lock()
		switch {
		case err == nil && slices.Equal(res.Delivered, []string{s.to}):
			s.must = append(s.must, n)
		case err == nil && slices.Equal(res.Queued, []string{s.to}):
			s.must = append(s.must, n)
			s.queued++
		case errors.As(err, &re) && re.Code == rpc.CodeFederationUnavailable, err != nil && !errors.As(err, &re):
			s.may = append(s.may, n)
		default:
			s.errs = append(s.errs, fmt.Sprintf("send %d: %+v %s", n, res, Describe(err)))
		}
		s.mu.Unlock()
	}
}

func (s *seqStream) mustCount() int   { s.mu.Lock(); defer s.mu.Unlock(); return len(s.must) }
func (s *seqStream) queuedCount() int { s.mu.Lock(); defer s.mu.Unlock(); return s.queued }

// waitSent waits until n sends were acknowledged (delivered or queued).
func (s *seqStream) waitSent(t *testing.T, n int) { t.Helper(); s.waitMust(t, n) }

// waitMust waits until at least n sends answered delivered or queued.
func (s *seqStream) waitMust(t *testing.T, n int) {
	t.Helper()
	Eventually(t, 2*ConvergeTimeout, func() error {
		if got := s.mustCount(); got < n {
			return fmt.Errorf("stream %s: %d sends acknowledged, waiting for %d", s.name, got, n)
		}
		return nil
	})
}

// received is the stream's sequence numbers in the order rx got them.
func (s *seqStream) received(t *testing.T) []int {
	t.Helper()
	var out []int
	for _, m := range s.rx.Messages() {
		var p struct {
			Stream string `json:"stream"`
			Seq    int    `json:"seq"`
		}
		if json.Unmarshal(m.Payload, &p) == nil && p.Stream == s.name {
			out = append(out, p.Seq)
		}
	}
	return out
}

// stopAndVerify stops the stream and checks it: every must arrived, in
// order, nothing twice, nothing never sent.
func (s *seqStream) stopAndVerify(t *testing.T) {
	t.Helper()
	close(s.stopped)
	<-s.done
	s.mu.Lock()
	must, may, errs := slices.Clone(s.must), slices.Clone(s.may), slices.Clone(s.errs)
	s.mu.Unlock()
	if len(errs) > 0 {
		t.Fatalf("stream %s: %d sends failed: %v", s.name, len(errs), errs)
	}
	Eventually(t, 2*ConvergeTimeout, func() error {
		got := s.received(t)
		for _, n := range must {
			if !slices.Contains(got, n) {
				return fmt.Errorf("stream %s: acknowledged message %d not received (%d of %d)", s.name, n, len(got), len(must))
			}
		}
		return nil
	})
	time.Sleep(time.Second) // a late duplicate would arrive now
	got := s.received(t)
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("stream %s: out of order or duplicated: %d after %d", s.name, got[i], got[i-1])
		}
	}
	for _, n := range got {
		if !slices.Contains(must, n) && !slices.Contains(may, n) {
			t.Fatalf("stream %s: received %d that was never sent", s.name, n)
		}
	}
	t.Logf("stream %s: %d sent, %d acknowledged (%d of them queued), %d unknown, %d received", s.name, len(must)+len(may), len(must), s.queued, len(may), len(got))
}
