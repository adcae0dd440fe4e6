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
// node of its own system (the cross-node relay). Both without TLS. The
// guaranteed case sends with meta.delivery "guaranteed": each message is
// stored in dc1's Raft outbox, recorded in dc2's Raft inbox and removed
// from the outbox (three commits) before its answer.
func BenchmarkFederation_CrossSystem(b *testing.B) {
	b.Run("map-send/dc1-to-dc2", func(b *testing.B) { benchFederatedSend(b, false) })
	b.Run("map-send-guaranteed/dc1-to-dc2", func(b *testing.B) { benchFederatedSend(b, true) })
	b.Run("baseline-map-send/node1-to-node2", benchCrossNodeInsecure)
}

// benchCrossNodeInsecure is BenchmarkRouting_CrossNode's node1-to-node2
// case without TLS, like the federated case (links run in dev mode here).
func benchCrossNodeInsecure(b *testing.B) {
	c := New(b, 2, WithInsecure(), WithLogLevel(slog.LevelWarn))
	cork := &corkedConn{}
	src := rawAgent(b, c.Nodes()[0].MAPURL(), "src", cork)
	dst := rawAgent(b, c.Nodes()[1].MAPURL(), "dst", nil)
	c.RequireConverged(b)
	pipelineSends(b, cork, src, dst, `{"agent":"dst"}`, `"delivered":["dst"]`)
}

func benchFederatedSend(b *testing.B, guaranteed bool) {
	net := NewNetwork(b, nil)
	dc1 := New(b, 1, WithSystem("dc1"), WithSharedNetwork(net), WithInsecure(), WithLogLevel(slog.LevelWarn))
	dc2 := New(b, 1, WithSystem("dc2"), WithSharedNetwork(net), WithInsecure(), WithLogLevel(slog.LevelWarn))
	Link(b, dc1, dc2, LinkSpec{FromExport: exportAll, ToExport: exportAll})
	Eventually(b, 10*time.Second, func() error { return dc1.LinkUp("dc2") })
	cork := &corkedConn{}
	src := rawAgent(b, dc1.Node(0).MAPURL(), "src", cork)
	dst := rawAgent(b, dc2.Node(0).MAPURL(), "dst", nil)
	to := `"dc2:agent:dst"`
	if guaranteed {
		to += `,"meta":{"delivery":"guaranteed"}` // pipelineSends puts the payload after "to"
	}
	pipelineSends(b, cork, src, dst, to, `"delivered":["dc2:agent:dst"]`)
}
