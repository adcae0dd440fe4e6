package clustertest

import "testing"

// wanHopsRounds is how many times BenchmarkFederation_WANHops alternates
// the two builds.
const wanHopsRounds = 3

// BenchmarkFederation_WANHops: BenchmarkFederation_WAN's request/reply
// (agents on the servers the streams connect: no relay inside either
// system) and its same-system reference (two agents of dc1 on different
// nodes), for the current build and the build at git revision
// $CONCORD_BENCH_BEFORE, alternating, each in a fresh WAN beside a raw TCP
// echo over the same link measured in that WAN. It is for changes to the
// nodes' own cost per hop (MAP connection, router, the federation stream,
// delivery to the agent's connection): reportLegs splits each leg, and
// the alternation spreads the machine's drifting load over both builds.
//
// It skips without CONCORD_BENCH_BEFORE, and like every WAN benchmark
// without root. It ignores b.N: one run is the fixed rounds.
func BenchmarkFederation_WANHops(b *testing.B) {
	alternateBuilds(b, wanHopsRounds, "f05ba89, say", "request-reply/fewest-relays", wanHops)
}

// wanHops measures, in a fresh linked WAN from opts, request/reply across
// the link between agents on the stream-holding servers, and the same
// between two nodes of dc1.
func wanHops(b *testing.B, opts []ProcOption) {
	w, dc1, dc2, echo := linkedWAN(b, opts)
	a, bb, relays := fewestRelays(b, dc1, dc2)
	reportAgainstEcho(b, recordedRequestReply(b, w, a, bb), echo)
	b.ReportMetric(float64(relays), "relay-hops")
	carol, dave := wanAgent(b, dc1, 0, "carol"), wanAgent(b, dc1, 1, "dave")
	same, _ := percentiles(latencies(requestReply(b, carol, `{"agent":"dave"}`, dave, `{"agent":"carol"}`, fixedRounds())))
	b.ReportMetric(ms(same), "same-system-p50-ms")
}
