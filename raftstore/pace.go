package raftstore

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Pacing replication to non-voters. raft replicates to every follower
// alike: as soon as one AppendEntries is answered, the next carries
// whatever was appended meanwhile. Under steady writes each follower then
// costs the leader one RPC (encoding, a TLS write, a read) per group
// commit, and costs the follower one fsync per RPC. Non-voters are not in
// the commit quorum, so nobody waits for them to keep that pace: the
// leader's replication goroutine for a non-voter starts at most two
// AppendEntries carrying entries per NonvoterReplicationInterval. After
// an answered one, it waits until the interval has passed since the start
// of the one before it, and its next RPC carries every entry appended
// meanwhile (raft sends all it has, up to MaxAppendEntries).
//
// Two, not one: a lone write through a non-voter (forwarded to the
// leader) needs two RPCs, the entry and then the commit index (the
// nudge's NOOP, nudge.go), and its caller waits for both. With two per
// interval a write after a quiet spell is not delayed at all; under
// steady writes a non-voter lags by up to about the interval.
//
// Safety: nothing about acknowledgement changes. A non-voter still answers
// only for entries it has written and fsynced, and the leader still counts
// only voters toward the commit index. The pause only makes a non-voter
// lag; a promoted server stops being paced within suffrageTTL of the
// leader's latest configuration saying it votes (paced a moment longer,
// only its acknowledgements come later, never before its fsync).
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

	// mu guards the fields below.
	mu        sync.Mutex
	last      map[raft.ServerID]time.Time // start of the last paced-eligible RPC per server
	nonvoters map[raft.ServerID]bool      // from the configuration read at checked
	checked   time.Time
}

// configSource is what pacer needs from raft.
type configSource interface {
	GetConfiguration() raft.ConfigurationFuture
}

// setConfigSource gives the pacer raft's configuration; until then
// nothing is paced.
func (p *pacer) setConfigSource(c configSource) { p.config.Store(c) }

// hold pauses the caller (raft's replication goroutine for id) until
// interval has passed since the start of the RPC before this one, if id
// is a non-voter and both carried a partial batch and succeeded.
func (p *pacer) hold(id raft.ServerID, start time.Time, entries int, resp *raft.AppendEntriesResponse) {
	if p.interval <= 0 || entries == 0 || entries >= p.maxBatch || !resp.Success || !p.nonvoter(id) {
		return
	}
	p.mu.Lock()
	prev, seen := p.last[id]
	if p.last == nil {
		p.last = make(map[raft.ServerID]time.Time)
	}
	p.last[id] = start
	p.mu.Unlock()
	wait := p.interval - time.Since(prev)
	if !seen || wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-p.stop:
	}
}

// suffrageTTL is how long the pacer trusts its copy of the configuration.
// raft's GetConfiguration clones it on every call, which showed as 1.7% of
// a leader's CPU when asked per RPC; a change is seen this much later at
// most, which only delays (un)pacing, never an acknowledgement.
const suffrageTTL = 100 * time.Millisecond

// nonvoter reports whether the latest configuration (raft answers it from
// a cached copy, without its main loop) lists id as a non-voter, as of at
// most suffrageTTL ago.
func (p *pacer) nonvoter(id raft.ServerID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); now.Sub(p.checked) > suffrageTTL {
		c, ok := p.config.Load().(configSource)
		if !ok {
			return false
		}
		f := c.GetConfiguration()
		if f.Error() != nil {
			return false
		}
		p.checked = now
		clear(p.nonvoters)
		if p.nonvoters == nil {
			p.nonvoters = make(map[raft.ServerID]bool)
		}
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == raft.Nonvoter {
				p.nonvoters[s.ID] = true
			}
		}
	}
	return p.nonvoters[id]
}
