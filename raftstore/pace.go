package raftstore

import (
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Pacing replication to non-voters. raft replicates to every follower
// alike: as soon as one AppendEntries is answered, the next carries
// whatever was appended meanwhile. Under steady writes each follower then
// costs the leader one RPC (encoding, a TLS write, a read) per group
// commit, and costs the follower one fsync per RPC. Non-voters are not in
// the commit quorum, so nobody waits for them to keep that pace: after an
// answered AppendEntries that carried entries, the leader's replication
// goroutine for a non-voter waits until NonvoterReplicationInterval has
// passed since the RPC began, and its next RPC carries every entry
// appended meanwhile (raft sends all it has, up to MaxAppendEntries).
//
// Safety: nothing about acknowledgement changes. A non-voter still answers
// only for entries it has written and fsynced, and the leader still counts
// only voters toward the commit index. The pause only makes a non-voter
// lag by up to the interval; a promoted server stops being paced as soon
// as the leader's latest configuration says it votes (and if it were paced
// a moment longer, only its acknowledgements would come later, never
// earlier than its fsync).
//
// Heartbeats carry no entries and are never paced (raft sends them on
// another goroutine anyway). A full batch (MaxAppendEntries) is not paced
// either, so a lagging non-voter catches up at full speed. Pipelined
// replication (MaxRPCsInFlight > 1) is not paced.

// pacer decides how long the replication goroutine of one follower waits
// after an AppendEntries.
type pacer struct {
	interval time.Duration   // 0: off
	maxBatch int             // raft's MaxAppendEntries
	config   atomic.Value    // configSource: raft, once it exists
	stop     <-chan struct{} // a closed stop ends every pause at once
}

// configSource is what pacer needs from raft.
type configSource interface {
	GetConfiguration() raft.ConfigurationFuture
}

// setConfigSource gives the pacer raft's configuration; until then
// nothing is paced.
func (p *pacer) setConfigSource(c configSource) { p.config.Store(c) }

// hold pauses the caller (raft's replication goroutine for id) until
// interval has passed since start, if id is a non-voter and the RPC
// carried a partial batch and succeeded.
func (p *pacer) hold(id raft.ServerID, start time.Time, entries int, resp *raft.AppendEntriesResponse) {
	if p.interval <= 0 || entries == 0 || entries >= p.maxBatch || !resp.Success {
		return
	}
	wait := p.interval - time.Since(start)
	if wait <= 0 || !p.nonvoter(id) {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-p.stop:
	}
}

// nonvoter reports whether the latest configuration (raft answers it from
// a cached copy, without its main loop) lists id as a non-voter.
func (p *pacer) nonvoter(id raft.ServerID) bool {
	c, ok := p.config.Load().(configSource)
	if !ok {
		return false
	}
	f := c.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == id {
			return s.Suffrage == raft.Nonvoter
		}
	}
	return false
}
