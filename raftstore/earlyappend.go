package raftstore

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Early append: the leader sends new entries to its voters while its own
// fsync runs, instead of after it.
//
// hashicorp/raft's leader writes a batch to its log (one fdatasync) and
// only then wakes its replication goroutines (dispatchLogs), so a lone
// write pays the leader's fsync and a follower's fsync in series: about
// half of a 1-client write's latency here (DESIGN.md, "One write's
// latency"). The Raft thesis (10.2.1) allows the leader to write its log
// in parallel with replicating it: an entry still counts as stored on the
// leader only once its own write returns, so commit needs a majority of
// synced copies as before.
//
// raft has no hook for that, but the log store sees the batch first. When
// the leader's entries are written to the segment (before their fsync),
// earlyAppender sends each voter the AppendEntries raft's replication
// would send for them: the same term, previous entry and entries, and the
// commit index known now. A follower that holds the previous entry stores
// them (its fsync now overlapping the leader's) and answers. raft's own
// AppendEntries for the batch comes after the leader's fsync; the
// transport answers it in the follower's stead from that early answer
// (answer; waiting for it when it is still in flight), so the leader
// commits once its own fsync and one follower's early answer are both in,
// as etcd's leader does, instead of a round trip plus the follower's
// fsync after its own. Without a successful early answer covering it,
// raft's append goes out as always (the follower skips entries it
// already holds). A follower that lacks the previous entry refuses the
// early send and changes nothing.
//
// Safety rests on raft's own follower checks: the request carries the
// leader's term, so a follower that moved to a later term refuses it, and
// its previous-entry check keeps the follower's log a prefix of this
// leader's; a successful answer therefore says what raft's own would (the
// follower synced the leader's log up to those entries in this term), and
// raft counts an acknowledgement when it arrives in either case. The
// leader's own copy still counts only once its fsync returned (raft
// records its match after StoreLogs). Should the leader's fsync fail, the
// entries may be on a
// follower but not on the leader; the leader steps down (raft does so
// when an append fails), and the next leader either carries them on, as
// for any entry a leader replicated before failing, or overwrites them.
// The write's caller sees an error either way, as for a leader lost
// mid-commit.
//
// Cost bounds: only small batches (earlyAppendMaxEntries, the lone writes
// this is for; under load raft's group commit already overlaps rounds),
// only command and NOOP entries (configuration changes go raft's way
// only), at most one early send in flight per voter (one more skips that
// voter), non-voters never (they are paced, pace.go), and only to a voter
// known to hold the entry before the batch (from its answers to raft's
// appends and to early sends), so a lagging voter is not sent requests it
// must refuse; one that could not be reached gets none for
// earlyAppendBackoff.

// earlyAppendMaxEntries and earlyAppendMaxBytes bound the batches sent
// early: lone writes, whose request fits a socket's buffer at once.
const (
	earlyAppendMaxEntries = 8
	earlyAppendMaxBytes   = 64 << 10
)

// earlyWriteTimeout bounds the write of an early send on raft's
// goroutine. The request goes to an idle connection whose buffer is
// empty, so the write does not wait for the voter; the bound only keeps
// a broken connection from holding up raft.
const earlyWriteTimeout = 20 * time.Millisecond

// earlyAppendBackoff is how long a voter that could not be reached gets
// no early send.
const earlyAppendBackoff = 100 * time.Millisecond

// earlyAppender sends a leader's new entries to its voters before they
// are synced locally. It is called on raft's leader goroutine (through
// the log store) and starts one goroutine per send, owned by wg: raft's
// shutdown ends the calls, and the transport's close ends the sends.
type earlyAppender struct {
	self  raft.ServerID
	proto raft.ProtocolVersion
	addr  []byte // this server's address as raft encodes it in requests
	// send, or begin then end, are the transport's appendSender's.
	send    func(target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error
	begin   func(target raft.ServerAddress, args *raft.AppendEntriesRequest, writeBy time.Time) (*sendConn, error)
	end     func(c *sendConn, resp *raft.AppendEntriesResponse) error
	r       atomic.Pointer[raft.Raft] // set once raft runs
	prevLog func(index uint64) (term uint64, ok bool)
	wg      *sync.WaitGroup

	mu        sync.Mutex
	term      uint64 // the term the fields below belong to
	lastIndex uint64 // the last entry written in term, and its term
	lastTerm  uint64
	peers     map[raft.ServerID]*earlyPeer
}

// earlyPeer is one voter's early-send state; guarded by earlyAppender.mu.
type earlyPeer struct {
	sending   *earlySend // the send in flight, if any
	raftBusy  int        // raft's own appends with entries in flight
	quietTill time.Time  // no sends before this (the last one failed)
	// resp is the voter's last successful answer to an early send in
	// this term, and acked the last entry it acknowledged: answer stands
	// in for the voter only up to acked. Early sends go to voters only,
	// so what they acknowledge is synced; raft's own appends also reach
	// non-voters, whose log appends skip the fsync, so match does not
	// count for answer.
	resp  *raft.AppendEntriesResponse
	acked uint64
	// match is the highest index the voter is known to hold in this
	// term, from its answers to raft's appends (appended) and to early
	// sends. A batch goes early only when match reaches the entry before
	// it: otherwise the voter would refuse it, and raft logs each refusal.
	match uint64
}

// eligible reports whether logs may be sent early: a small batch of
// commands and NOOPs.
func eligible(logs []*raft.Log) bool {
	if len(logs) == 0 || len(logs) > earlyAppendMaxEntries {
		return false
	}
	size := 0
	for _, l := range logs {
		if l.Type != raft.LogCommand && l.Type != raft.LogNoop {
			return false
		}
		size += len(l.Data) + len(l.Extensions)
	}
	return size <= earlyAppendMaxBytes
}

// written is called by the log store once logs are written to the
// segment, before they are synced. On a leader it starts the early sends.
func (e *earlyAppender) written(logs []*raft.Log) {
	r := e.r.Load()
	if r == nil || len(logs) == 0 || r.State() != raft.Leader {
		return
	}
	first, last := logs[0], logs[len(logs)-1]
	prev := first.Index - 1
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if first.Term != e.term {
		// What voters held under another leader says nothing now, and
		// this server's log may have changed while it followed.
		e.term = first.Term
		e.lastIndex, e.lastTerm = 0, 0
		clear(e.peers)
	}
	// A leader only appends to its log, so within a term the entry
	// before this batch is usually the last one of the previous batch.
	prevTerm, known := e.lastTerm, e.lastIndex == prev
	e.lastIndex, e.lastTerm = last.Index, last.Term
	if !eligible(logs) || !e.anyReady(prev, now) {
		return // peers exist only once raft's appends reached them
	}
	if !known && prev > 0 {
		var ok bool
		if prevTerm, ok = e.prevLog(prev); !ok {
			return // compacted away: raft sends a snapshot or reads it itself
		}
	}
	f := r.GetConfiguration() // a cached copy, no trip through raft's loop
	if f.Error() != nil {
		return
	}
	var req *raft.AppendEntriesRequest
	for _, srv := range f.Configuration().Servers {
		p := e.peers[srv.ID]
		if p == nil || srv.ID == e.self || srv.Suffrage != raft.Voter || !p.ready(prev, now) {
			continue
		}
		if req == nil {
			req = &raft.AppendEntriesRequest{
				RPCHeader:         raft.RPCHeader{ProtocolVersion: e.proto, ID: []byte(e.self), Addr: e.addr},
				Term:              first.Term,
				Leader:            e.addr,
				PrevLogEntry:      prev,
				PrevLogTerm:       prevTerm,
				Entries:           logs,
				LeaderCommitIndex: r.CommitIndex(),
			}
		}
		sent := &earlySend{last: last.Index, done: make(chan struct{})}
		p.sending = sent
		e.start(p, sent, srv.Address, req, now)
	}
}

// anyReady reports whether some peer may be sent a batch after prev now;
// e.mu must be held.
func (e *earlyAppender) anyReady(prev uint64, now time.Time) bool {
	for _, p := range e.peers {
		if p.ready(prev, now) {
			return true
		}
	}
	return false
}

// ready reports whether p may be sent a batch after prev now: no send in
// flight (neither early nor raft's own: a voter busy with an append
// stores the next one only after it, so an early send would gain little
// and cost a duplicate; this keeps the early append to lone writes), not
// quiet after a failure, and known to hold prev.
func (p *earlyPeer) ready(prev uint64, now time.Time) bool {
	return p.sending == nil && p.raftBusy == 0 && p.match >= prev && !now.Before(p.quietTill)
}

// peer returns id's state, creating it; e.mu must be held.
func (e *earlyAppender) peer(id raft.ServerID) *earlyPeer {
	p := e.peers[id]
	if p == nil {
		p = &earlyPeer{}
		e.peers[id] = p
	}
	return p
}

// start sends req to one voter. On an idle connection the request is
// written here, on raft's goroutine, so it leaves before the leader's
// fsync starts (a goroutine woken for it waited up to 0.1 ms for a CPU
// on a loaded host), and a goroutine waits for the answer; otherwise a
// goroutine sends it. e.mu is held.
func (e *earlyAppender) start(p *earlyPeer, sent *earlySend, target raft.ServerAddress, req *raft.AppendEntriesRequest, now time.Time) {
	if e.begin != nil {
		c, err := e.begin(target, req, now.Add(earlyWriteTimeout))
		if err != nil {
			e.noteLocked(p, sent, req, nil, err)
			return
		}
		if c != nil {
			e.wg.Go(func() {
				var resp raft.AppendEntriesResponse
				err := e.end(c, &resp)
				e.note(p, sent, req, &resp, err)
			})
			return
		}
	}
	e.wg.Go(func() {
		var resp raft.AppendEntriesResponse
		err := e.send(target, req, &resp)
		e.note(p, sent, req, &resp, err)
	})
}

// note records how an early send to p went.
func (e *earlyAppender) note(p *earlyPeer, sent *earlySend, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.noteLocked(p, sent, req, resp, err)
}

// noteLocked is note with e.mu held.
func (e *earlyAppender) noteLocked(p *earlyPeer, sent *earlySend, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, err error) {
	defer close(sent.done)
	p.sending = nil
	switch {
	case err != nil:
		p.quietTill = time.Now().Add(earlyAppendBackoff)
	case resp.Success && resp.Term == req.Term:
		p.match = max(p.match, sent.last)
		p.acked = max(p.acked, sent.last)
		p.resp = resp
	default:
		p.match, p.acked, p.resp = 0, 0, nil // its log differs: wait for raft's next append to it
	}
}

// earlySend is an early send in flight to one voter.
type earlySend struct {
	last uint64        // the last entry it carries
	done chan struct{} // closed once its answer is noted
}

// answer answers raft's own append of args to voter id without sending
// it, when the voter already acknowledged every entry of args in this
// term (an early send's answer, waited for if one carrying them is in
// flight): that acknowledgement says the voter synced them after checking
// the entry before them, which is all raft's answer would say, so raft
// counts it toward the commit one round trip sooner. It reports false
// when args must go to the voter as usual.
//
// The voter misses only the commit index args carries, which raft's next
// append (or the nudge, nudge.go) brings, as it would for the entry after.
func (e *earlyAppender) answer(id raft.ServerID, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) bool {
	if len(args.Entries) == 0 {
		return false
	}
	last := args.Entries[len(args.Entries)-1].Index
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.peers[id]
	if p == nil || args.Term != e.term {
		return false
	}
	if sent := p.sending; sent != nil && sent.last >= last && p.acked < last {
		e.mu.Unlock()
		<-sent.done // the transport's timeout bounds the send
		e.mu.Lock()
		if e.peers[id] != p || args.Term != e.term {
			return false
		}
	}
	if p.resp == nil || p.acked < last {
		return false
	}
	*resp = *p.resp
	resp.Success, resp.NoRetryBackoff = true, false
	resp.LastLog = max(resp.LastLog, last)
	return true
}

// raftSending notes that raft's own append with entries to id starts
// (on) or ended.
func (e *earlyAppender) raftSending(id raft.ServerID, on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.peer(id)
	if on {
		p.raftBusy++
	} else if p.raftBusy > 0 {
		p.raftBusy--
	}
}

// appended notes voter id's answer to one of raft's own appends of
// this term: with ok, it holds the log up to match. A refusal says its
// log differs from what was known (a server re-added with an empty log,
// say): forget what it acknowledged, so answer no longer stands in for
// it, until it acknowledges again.
func (e *earlyAppender) appended(id raft.ServerID, term, match uint64, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if term != e.term {
		return // written clears the state when the term changes
	}
	p := e.peer(id)
	if !ok {
		p.match, p.acked, p.resp = 0, 0, nil
		return
	}
	p.match = max(p.match, match)
}

// newEarlyAppender returns the Store's early appender; it sends through
// the transport's appendSender (one encoding per entry for all voters).
func (s *Store) newEarlyAppender(proto raft.ProtocolVersion) *earlyAppender {
	self := raft.ServerID(s.cfg.NodeID)
	return &earlyAppender{
		self:  self,
		proto: proto,
		addr:  s.trans.EncodePeer(self, s.trans.LocalAddr()),
		send:  s.trans.sender.send,
		begin: s.trans.sender.begin,
		end:   s.trans.sender.end,
		prevLog: func(index uint64) (uint64, bool) {
			var l raft.Log
			if err := s.bolt.log.GetLog(index, &l); err != nil {
				return 0, false
			}
			return l.Term, true
		},
		wg:    &s.bg,
		peers: make(map[raft.ServerID]*earlyPeer),
	}
}

// logWritten is the log store's written hook: an append is in the file,
// not yet synced.
func (s *Store) logWritten(logs []*raft.Log) {
	if s.early != nil {
		s.early.written(logs)
	}
	if h := s.testHookLogWritten.Load(); h != nil {
		(*h)(logs)
	}
}
