package clustertest

import (
	"log/slog"
	"testing"
	"time"
)

// BenchmarkFederation_CrossSystem: messages per second from an agent in
// system dc1 to an agent in dc2 (one node each, linked with a token, no
// added delay), 256-byte payloads, pipelined as in
// BenchmarkRouting_CrossNode; every answer must name the remote agent as
// delivered, which the remote system acknowledges per message. Beside it
// in the same run, the baseline: the same sender to an agent on another
// node of its own system (the cross-node relay).
func BenchmarkFederation_CrossSystem(b *testing.B) {
	b.Run("map-send/dc1-to-dc2", benchFederatedSend)
	b.Run("baseline-map-send/node1-to-node2", func(b *testing.B) { benchMAPSend(b, 1) })
}

func benchFederatedSend(b *testing.B) {
	net := NewNetwork(b, nil)
	dc1 := New(b, 1, WithSystem("dc1"), WithSharedNetwork(net), WithLogLevel(slog.LevelWarn))
	dc2 := New(b, 1, WithSystem("dc2"), WithSharedNetwork(net), WithLogLevel(slog.LevelWarn))
	Link(b, dc1, dc2, LinkSpec{FromExport: exportAll, ToExport: exportAll})
	Eventually(b, 10*time.Second, func() error { return dc1.LinkUp("dc2") })
	cork := &corkedConn{}
	src := rawAgent(b, dc1.Node(0).MAPURL(), "src", cork)
	dst := rawAgent(b, dc2.Node(0).MAPURL(), "dst", nil)
	pipelineSends(b, cork, src, dst, `"dc2:agent:dst"`, `"delivered":["dc2:agent:dst"]`)
}
