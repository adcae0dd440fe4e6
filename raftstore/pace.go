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
//
// Two intervals. Each append costs a non-voter a fixed amount besides its
// entries (the RPC, the answer, raft's follower loop and log write, the
// FSM batch and the watchers it wakes, the wake-ups between them), so the
// longer the interval, the less a non-voter spends per write. What a
// longer interval delays is what a non-voter's own clients see. Only the
// leader paces, and it learns when a client of a non-voter waits for an
// entry to reach it: the non-voter forwards a read-your-write fence's NOOP
// (hurry.go), or a command whose result it must compute itself (no
// encoded result comes back), and waits for its own apply. So a non-voter
// is paced at the background interval (NonvoterBackgroundInterval, 100
// ms), which bounds how far it lags under steady writes (what its
// subscribers' events and plain reads trail by), except around such a
// forward (hurry): a background pause in progress ends at once, and the
// one append that follows carries the entries and a commit index covering
// what the client waits for; once it is answered the non-voter is back on
// the background interval, counted from that append. Hurries that arrive
// while a hurried append is on its way, or right after it, are
// coalesced: if that append did not deliver them, the next goes once the
// interval (NonvoterReplicationInterval, 20 ms) has passed since it
// started, so clients of one non-voter waiting all the time get at most
// one append per interval, never more. No hurry waits longer than it
// would under a 20 ms pace. A fence hurries at once, for the leader's
// commit index (what it waits for is committed already); a command once
// it is committed, for its index. Writes answered with the leader's
// encoded result (node's map writes) do not hurry: their client already
// has its answer, and a read after one sends a fence.

// pacer decides how long the replication goroutine of one follower waits
// after an AppendEntries.
type pacer struct {
	interval   time.Duration   // 0: off
	background time.Duration   // for a non-voter nobody waits on; <= interval: interval
	maxBatch   int             // raft's MaxAppendEntries
	config     atomic.Value    // configSource: raft, once it exists
	stop       <-chan struct{} // a closed stop ends every pause at once

	// mu guards the fields below.
	mu        sync.Mutex
	peers     map[raft.ServerID]*pacedPeer
	nonvoters map[raft.ServerID]bool // from the configuration read at checked
	checked   time.Time
}

// pacedPeer is what the pacer knows of one follower; the pacer's mu
// guards every field but wake.
type pacedPeer struct {
	answered  time.Time     // when its last paced-eligible RPC was answered
	wanted    uint64        // the highest index a client there waits for (hurry)
	delivered uint64        // the highest index it holds and knows committed
	hurried   bool          // a pause ended for a hurry: the next append is a hurried one
	wake      chan struct{} // buffered (1): hurry wakes a pause to look again
}

// configSource is what pacer needs from raft.
type configSource interface {
	GetConfiguration() raft.ConfigurationFuture
}

// setConfigSource gives the pacer raft's configuration; until then
// nothing is paced.
func (p *pacer) setConfigSource(c configSource) { p.config.Store(c) }

// peer returns id's state, created on first use; p.mu must be held.
func (p *pacer) peer(id raft.ServerID) *pacedPeer {
	pp := p.peers[id]
	if pp == nil {
		if p.peers == nil {
			p.peers = make(map[raft.ServerID]*pacedPeer)
		}
		pp = &pacedPeer{wake: make(chan struct{}, 1)}
		p.peers[id] = pp
	}
	return pp
}

// intervalOf is pp's interval now: the short one while an index a client
// of pp waits for has not been delivered to it; p.mu must be held.
func (p *pacer) intervalOf(pp *pacedPeer) time.Duration {
	if p.background <= p.interval || pp.waiting() {
		return p.interval
	}
	return p.background
}

// waiting reports whether a client of pp waits for an index not delivered
// to it yet; the pacer's mu must be held.
func (pp *pacedPeer) waiting() bool { return pp.delivered < pp.wanted }

// pauseOf is how long after the start of the append just answered the
// next one to pp may start; afterHurry: that append was a hurried one.
// p.mu must be held. Nobody waiting: the background interval. A client
// waiting: at once, unless the append just answered was itself hurried,
// then the interval after it (hurries coalesce; never later than a 20 ms
// pace would send it).
func (p *pacer) pauseOf(pp *pacedPeer, afterHurry bool) time.Duration {
	if p.background <= p.interval || !pp.waiting() {
		return p.intervalOf(pp)
	}
	if afterHurry {
		return p.interval
	}
	return 0
}

// delivered records the answer to an AppendEntries to id. A success says
// id now holds every entry up to the request's last (its previous entry
// when it carried none) and knows the commit index it carried. A refusal
// says it lacks entries (a restart that set its unsynced log aside, a new
// term): what it was delivered before no longer counts.
func (p *pacer) delivered(id raft.ServerID, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) {
	if p.interval <= 0 || p.background <= p.interval {
		return
	}
	if !resp.Success {
		p.mu.Lock()
		if pp := p.peers[id]; pp != nil {
			pp.delivered = 0
		}
		p.mu.Unlock()
		return
	}
	last := args.PrevLogEntry
	if n := len(args.Entries); n > 0 {
		last = args.Entries[n-1].Index
	}
	d := min(last, args.LeaderCommitIndex)
	p.mu.Lock()
	defer p.mu.Unlock()
	if pp := p.peers[id]; pp != nil && d > pp.delivered {
		pp.delivered = d
	}
}

// hold pauses the caller (raft's replication goroutine for id), after an
// RPC that started at start, until id's interval has passed since start,
// if id is a non-voter, the RPC carried a partial batch and succeeded, and
// it started less than a quiet spell after the previous such RPC was
// answered.
func (p *pacer) hold(id raft.ServerID, start time.Time, entries int, resp *raft.AppendEntriesResponse) {
	if p.interval <= 0 || entries == 0 || entries >= p.maxBatch || !resp.Success || !p.nonvoter(id) {
		return
	}
	now := time.Now()
	p.mu.Lock()
	pp := p.peer(id)
	prev := pp.answered
	pp.answered = now
	afterHurry := pp.hurried
	pp.hurried = false
	quiet := quietSpell(p.intervalOf(pp))
	p.mu.Unlock()
	if !prev.IsZero() && start.Sub(prev) < quiet {
		p.pause(pp, start, afterHurry)
	}
}

// quietSpell is how long after an answer the next RPC must start to count
// as the first after a quiet spell, for a follower paced at interval.
func quietSpell(interval time.Duration) time.Duration { return interval + interval/4 }

// pause waits until pp's pause (pauseOf) has passed since start, or
// until the store stops. A hurry (a forward from pp) makes it look again:
// a client of pp may wait now. A pause that ends for a hurry marks the
// append after it as hurried.
func (p *pacer) pause(pp *pacedPeer, start time.Time, afterHurry bool) {
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		now := time.Now()
		p.mu.Lock()
		d := p.pauseOf(pp, afterHurry) - now.Sub(start)
		if d <= 0 && pp.waiting() {
			pp.hurried = true
		}
		p.mu.Unlock()
		if d <= 0 {
			return
		}
		if t == nil {
			t = time.NewTimer(d)
		} else {
			t.Reset(d)
		}
		select {
		case <-t.C: // look once more: was the pause cut short for a client?
		case <-pp.wake:
		case <-p.stop:
			return
		}
	}
}

// hurry records that a client of id waits for index (committed on this
// leader) to arrive there (ApplyForwardedFrom): a background pause in
// progress ends at once, or, right after a hurried append that did not
// deliver index, once the interval has passed since it started.
// Cheap enough per forwarded command: a map lookup under a lock and a
// non-blocking send.
func (p *pacer) hurry(id raft.ServerID, index uint64) {
	if p.interval <= 0 || p.background <= p.interval {
		return
	}
	p.mu.Lock()
	pp := p.peer(id)
	pp.wanted = max(pp.wanted, index)
	waiting := pp.delivered < pp.wanted
	p.mu.Unlock()
	if !waiting {
		return
	}
	select {
	case pp.wake <- struct{}{}:
	default:
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
