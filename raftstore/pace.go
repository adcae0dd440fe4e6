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
// the commit quorum, so nobody waits for them to keep that pace: under
// steady writes the leader's replication goroutine for a non-voter starts
// one AppendEntries carrying entries per NonvoterReplicationInterval.
// After an answered one, it waits until the interval has passed since
// that one started, and its next RPC carries every entry appended
// meanwhile (raft sends all it has, up to MaxAppendEntries).
//
// After a quiet spell, two go at once: a lone write through a non-voter
// (forwarded to the leader) needs two RPCs, the entry and then the commit
// index (the nudge's NOOP, nudge.go), and its caller waits for both. So
// an RPC that starts at least quietSpell (1.25 intervals) after the
// previous one was answered (the non-voter was idle meanwhile) is not
// followed by a pause; the one after it is. Under steady writes the next
// RPC starts as soon as a pause ends, less than an interval after the
// previous answer (the quarter covers a late timer), so this does not
// fire and a non-voter lags by up to about the interval.
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
	answered  map[raft.ServerID]time.Time // when the last paced-eligible RPC per server was answered
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

// hold pauses the caller (raft's replication goroutine for id), after an
// RPC that started at start, until interval has passed since start, if id
// is a non-voter, the RPC carried a partial batch and succeeded, and it
// started less than quietSpell after the previous such RPC was answered.
func (p *pacer) hold(id raft.ServerID, start time.Time, entries int, resp *raft.AppendEntriesResponse) {
	if p.interval <= 0 || entries == 0 || entries >= p.maxBatch || !resp.Success || !p.nonvoter(id) {
		return
	}
	now := time.Now()
	p.mu.Lock()
	prev, seen := p.answered[id]
	if p.answered == nil {
		p.answered = make(map[raft.ServerID]time.Time)
	}
	p.answered[id] = now
	p.mu.Unlock()
	if seen && start.Sub(prev) < p.quietSpell() {
		p.pause(p.interval - now.Sub(start))
	}
}

// quietSpell is how long after an answer the next RPC must start to count
// as the first after a quiet spell.
func (p *pacer) quietSpell() time.Duration { return p.interval + p.interval/4 }

// pause waits for d, or until the store stops.
func (p *pacer) pause(d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
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
