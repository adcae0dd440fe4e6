package clustertest

import (
	"testing"
	"time"

	"github.com/concordmap/concord/cluster-test/wannet"
)

// wanRecordLimit bounds the packets a WAN benchmark records per figure
// (a request/reply round crosses about a dozen).
const wanRecordLimit = 20000

// reportLegs splits each request/reply round into where its time went,
// from the link's packet record: for the request and for the reply, the
// sending side (agent's write in the test process to the packet leaving
// the sender's namespace: MAP connection, router, any relay inside the
// system, the federation stream, gRPC, TLS, TCP), the wire beyond the
// injected delay (the emulator's error) and the receiving side (packet
// in to the agent's read: TCP, TLS, gRPC, the inbound stream, any relay
// inside the system, the MAP connection). The packet a leg rode is the
// last one from the sender's namespace to arrive before the agent read
// the message. p50s are reported in ms.
func reportLegs(b *testing.B, rs []rrRound, pkts []wannet.Packet, fromNS, toNS string) {
	var reqSend, reqWire, reqRecv, repSend, repWire, repRecv []time.Duration
	for _, r := range rs {
		if r.heard.IsZero() {
			continue
		}
		req, ok1 := lastBefore(pkts, fromNS, r.sent, r.heard)
		rep, ok2 := lastBefore(pkts, toNS, r.replied, r.answered)
		if !ok1 || !ok2 {
			continue
		}
		reqSend = append(reqSend, req.Read.Sub(r.sent))
		reqWire = append(reqWire, req.Sent.Sub(req.Read)-wanDelay)
		reqRecv = append(reqRecv, r.heard.Sub(req.Sent))
		repSend = append(repSend, rep.Read.Sub(r.replied))
		repWire = append(repWire, rep.Sent.Sub(rep.Read)-wanDelay)
		repRecv = append(repRecv, r.answered.Sub(rep.Sent))
	}
	if len(reqSend) == 0 {
		b.Logf("no round matched a recorded packet (%d packets)", len(pkts))
		return
	}
	for _, f := range []struct {
		name string
		d    []time.Duration
	}{
		{"req-send-ms", reqSend}, {"req-wire-excess-ms", reqWire}, {"req-recv-ms", reqRecv},
		{"rep-send-ms", repSend}, {"rep-wire-excess-ms", repWire}, {"rep-recv-ms", repRecv},
	} {
		p50, _ := percentiles(f.d)
		b.ReportMetric(ms(p50), f.name)
	}
	if len(rs) > 0 {
		b.ReportMetric(float64(len(pkts))/float64(len(rs)+10), "packets/round") // +10: the warm-up rounds
	}
}

// lastBefore is the last packet from namespace from that the link took
// at or after after and delivered at or before by.
func lastBefore(pkts []wannet.Packet, from string, after, by time.Time) (wannet.Packet, bool) {
	var found wannet.Packet
	ok := false
	for _, p := range pkts {
		if p.From == from && !p.Read.Before(after) && !p.Sent.After(by) {
			found, ok = p, true
		}
	}
	return found, ok
}

// reportWire reports the emulator's own error over a recorded figure:
// the p50 of how late packets were handed over, in ms.
func reportWire(b *testing.B, pkts []wannet.Packet) {
	late := make([]time.Duration, len(pkts))
	for i, p := range pkts {
		late[i] = p.Late
	}
	p50, _ := percentiles(late)
	b.ReportMetric(ms(p50), "wire-late-ms")
}
