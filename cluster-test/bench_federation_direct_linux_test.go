package clustertest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/concordmap/concord/cluster-test/wannet"
)

// wanDirectRounds is how many times BenchmarkFederation_WANDirect
// alternates the two builds (the machine's load drifts; alternating
// spreads it over both).
const wanDirectRounds = 3

// BenchmarkFederation_WANDirect: request/reply over the 25 ms link with
// the agents placed so that each leg's stream lands on a server other
// than its target agent's (mostRelays): without direct streams each leg
// takes the relay inside the receiving system. The current build runs
// alternately with the build at the git revision $CONCORD_BENCH_BEFORE
// (be534b6: before direct streams), each in a fresh WAN and beside a raw
// TCP echo over the same link measured in that WAN, with reportLegs'
// split of each leg (req-recv-ms / rep-recv-ms hold the relay when it is
// taken). direct-msgs counts the envelopes both agents' nodes sent on
// direct streams.
//
// It skips without CONCORD_BENCH_BEFORE, and like every WAN benchmark
// without root. It ignores b.N: one run is the fixed rounds.
func BenchmarkFederation_WANDirect(b *testing.B) {
	alternateBuilds(b, wanDirectRounds, "be534b6: before direct streams", "request-reply/relay-each-leg", wanRelayLegs)
}

// alternateBuilds runs run for the build at git revision
// $CONCORD_BENCH_BEFORE and for the current one, alternately, rounds
// times, as sub-benchmarks named name/<build>/round=<r>. It skips without
// the variable (hint names a useful revision) and without root.
func alternateBuilds(b *testing.B, rounds int, hint, name string, run func(b *testing.B, opts []ProcOption)) {
	rev := os.Getenv("CONCORD_BENCH_BEFORE")
	if rev == "" {
		b.Skipf("set CONCORD_BENCH_BEFORE to a git revision to compare with (%s)", hint)
	}
	RequireWAN(b)
	builds := []struct {
		name string
		opts []ProcOption
	}{
		{"before=" + rev, []ProcOption{WithProcBinary(ConcordBinaryAt(b, rev))}},
		{"after", nil},
	}
	for r := range rounds {
		for _, bd := range builds {
			b.Run(fmt.Sprintf("%s/%s/round=%d", name, bd.name, r), func(b *testing.B) { run(b, bd.opts) })
		}
	}
}

// linkedWAN starts two systems of three processes from opts over the
// 25 ms link, linked with every agent exported both ways and the link up
// on both sides, and measures the raw echo's p50 over it.
func linkedWAN(b *testing.B, opts []ProcOption) (w *WAN, dc1, dc2 *ProcCluster, echo time.Duration) {
	w = StartWANWith(b, 3, wannet.Shape{Delay: wanDelay}, opts, "dc1", "dc2")
	dc1, dc2 = w.System("dc1"), w.System("dc2")
	w.Peer(b, "dc1", "dc2", "--export", "all")
	Eventually(b, ConvergeTimeout, func() error {
		if err := dc1.LinkUp(dc2); err != nil {
			return err
		}
		return dc2.LinkUp(dc1)
	})
	echo, _ = percentiles(tcpEcho(b, dc1.Namespace(), dc2.Namespace()))
	return w, dc1, dc2, echo
}

// reportAgainstEcho reports request/reply p50/p99 of rs beside the echo
// and the injected round trip.
func reportAgainstEcho(b *testing.B, rs []rrRound, echo time.Duration) {
	p50, p99 := percentiles(latencies(rs))
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(p99), "p99-ms")
	b.ReportMetric(ms(echo), "echo-p50-ms")
	b.ReportMetric(ms(p50-echo), "p50-minus-echo-ms")
	b.ReportMetric(ms(p50-2*wanDelay), "p50-minus-injected-rtt-ms")
}

// recordedRequestReply runs wanRounds request/replies from alice on
// process a of dc1 to bob on process bb of dc2 with the link's packets
// recorded, reports reportLegs' split, and returns the rounds.
func recordedRequestReply(b *testing.B, w *WAN, a, bb int) []rrRound {
	dc1, dc2 := w.System("dc1"), w.System("dc2")
	alice, bob := wanAgent(b, dc1, a, "alice"), wanAgent(b, dc2, bb, "bob")
	link := w.Link("dc1", "dc2")
	link.StartRecording(wanRecordLimit)
	rs := requestReply(b, alice, "dc2:agent:bob", bob, "dc1:agent:alice", fixedRounds())
	reportLegs(b, rs, link.StopRecording(), dc1.Namespace().Name, dc2.Namespace().Name)
	return rs
}

// wanRelayLegs measures, in a fresh linked WAN from opts, request/reply
// between agents placed with the most relays the streams' spread allows.
func wanRelayLegs(b *testing.B, opts []ProcOption) {
	w, dc1, dc2, echo := linkedWAN(b, opts)
	a, bb, relays := placeAgents(b, dc1, dc2, true)
	sent0 := directSent(b, dc1, a, "dc2") + directSent(b, dc2, bb, "dc1")
	reportAgainstEcho(b, recordedRequestReply(b, w, a, bb), echo)
	b.ReportMetric(float64(relays), "relay-hops-by-stream")
	b.ReportMetric(float64(directSent(b, dc1, a, "dc2")+directSent(b, dc2, bb, "dc1")-sent0), "direct-msgs")
}

// directSent is what process i of pc sent to peer on direct streams (0
// from a build without them).
func directSent(b *testing.B, pc *ProcCluster, i int, peer string) uint64 {
	b.Helper()
	links, err := pc.FedLinks(i)
	if err != nil {
		b.Fatal(err)
	}
	for _, st := range links {
		if st.GetLink().GetPeerSystemId() == peer {
			return st.GetDirectSent()
		}
	}
	return 0
}
