package federation

import (
	"cmp"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Outbox bounds when a link's policy leaves them unset.
const (
	DefaultOutboxMessages = 10_000
	DefaultOutboxBytes    = 16 << 20
	// maxInboxSeen bounds the processed ids kept above an inbox's floor;
	// past it the floor moves up over the oldest (a source never has that
	// many unacknowledged messages within its own outbox bounds).
	maxInboxSeen = 4 * DefaultOutboxMessages
	// maxStagedBytes bounds a directory update assembled from chunks: a
	// peer that never sends the last chunk cannot grow the state for ever.
	maxStagedBytes = 64 << 20
)

// OutboxLimits returns the message and byte bounds of a link's outbox.
func OutboxLimits(p *concordv1.FedOutboxPolicy) (msgs int, bytes uint64) {
	msgs, bytes = DefaultOutboxMessages, DefaultOutboxBytes
	if p.GetMaxMessages() > 0 {
		msgs = int(p.GetMaxMessages())
	}
	if p.GetMaxBytes() > 0 {
		bytes = p.GetMaxBytes()
	}
	return msgs, bytes
}

// applyOutboxPut appends a guaranteed message; its result is the seq.
func (s *State) applyOutboxPut(m *concordv1.FedOutboxPut) (uint64, error) {
	peer := m.GetPeerSystemId()
	l, ok := s.links[peer]
	if !ok {
		return 0, fmt.Errorf("%w: %s", ErrNoLink, peer)
	}
	if m.GetEnvelope() == nil {
		return 0, fmt.Errorf("%w: outbox put without an envelope", ErrInvalidCommand)
	}
	ob := s.outbox[peer]
	if ob == nil {
		ob = &concordv1.FedOutbox{PeerSystemId: peer, NextSeq: 1}
		s.outbox[peer] = ob
	}
	env := proto.CloneOf(m.GetEnvelope())
	env.GuaranteedSeq, env.GuaranteedFloor, env.Seq = ob.GetNextSeq(), 0, 0
	size := uint64(proto.Size(env))
	maxMsgs, maxBytes := OutboxLimits(l.GetOutbox())
	if len(ob.GetEntries())+1 > maxMsgs || ob.GetBytes()+size > maxBytes {
		return 0, fmt.Errorf("%w: the outbox to %s holds %d messages (%d bytes) of at most %d (%d bytes)",
			ErrOutboxFull, peer, len(ob.GetEntries()), ob.GetBytes(), maxMsgs, maxBytes)
	}
	ob.Entries = append(ob.Entries, &concordv1.FedOutboxEntry{Seq: env.GetGuaranteedSeq(), Envelope: env, AcceptedAtMs: m.GetNowMs()})
	ob.Bytes += size
	ob.NextSeq++
	return env.GetGuaranteedSeq(), nil
}

// Acked is one guaranteed message that left the outbox with its peer's
// answer (Ack.Seq is its outbox seq).
type Acked struct {
	MessageID string
	Ack       *concordv1.FedAck
}

// applyOutboxAck removes the answered messages and returns them; acks for
// messages no longer there (a second drainer's) change nothing.
func (s *State) applyOutboxAck(m *concordv1.FedOutboxAck) []Acked {
	ob := s.outbox[m.GetPeerSystemId()]
	if ob == nil {
		return nil
	}
	done := map[uint64]*concordv1.FedAck{}
	for _, a := range m.GetAcks() {
		done[a.GetSeq()] = a
	}
	var out []Acked
	kept := ob.Entries[:0]
	for _, e := range ob.GetEntries() {
		if a := done[e.GetSeq()]; a != nil {
			ob.Bytes -= uint64(proto.Size(e.GetEnvelope()))
			out = append(out, Acked{MessageID: e.GetEnvelope().GetMessageId(), Ack: a})
			continue
		}
		kept = append(kept, e)
	}
	clear(ob.Entries[len(kept):])
	ob.Entries = kept
	return out
}

// applyInboxMark records guaranteed messages from a source as processed.
// A mark made for a link since replaced (its link_epoch not the link's)
// is refused as for a removed link: its seqs numbered the old link's
// messages, and the new link's inbox starts afresh. A mark without an
// epoch (an older binary's entry) applies to the link there.
func (s *State) applyInboxMark(m *concordv1.FedInboxMark) error {
	src := m.GetSourceSystemId()
	l, ok := s.links[src]
	if !ok {
		return fmt.Errorf("%w: %s", ErrNoLink, src)
	}
	if e := m.GetLinkEpoch(); e != 0 && e != l.GetEpoch() {
		return fmt.Errorf("%w: %s (the link of epoch %d was replaced by that of epoch %d)", ErrNoLink, src, e, l.GetEpoch())
	}
	in := s.inbox[src]
	if in == nil {
		in = &concordv1.FedInbox{SourceSystemId: src, Floor: 1}
		s.inbox[src] = in
	}
	if len(m.GetSeqs()) == 0 && len(m.GetTakeSeqs()) > 0 {
		takeInbox(in, m)
		return nil
	}
	in.Floor = max(in.GetFloor(), m.GetFloor())
	for _, q := range m.GetSeqs() {
		if i, found := slices.BinarySearch(in.Seen, q); !found && q >= in.GetFloor() {
			in.Seen = slices.Insert(in.Seen, i, q)
		}
	}
	if n := len(in.Seen) - maxInboxSeen; n > 0 {
		in.Floor = max(in.Floor, in.Seen[n-1]+1)
	}
	// Everything below the floor is done: drop it, then absorb a run
	// that starts at the floor.
	i := 0
	for i < len(in.Seen) && in.Seen[i] < in.Floor {
		i++
	}
	for i < len(in.Seen) && in.Seen[i] == in.Floor {
		in.Floor++
		i++
	}
	in.Seen = slices.Delete(in.Seen, 0, i)
	// A recorded seq is no longer held.
	in.Takes = slices.DeleteFunc(in.Takes, func(t *concordv1.FedInboxTake) bool {
		_, seen := slices.BinarySearch(in.Seen, t.GetSeq())
		return t.GetSeq() < in.Floor || seen
	})
	return nil
}

// takeInbox holds m's take_seqs for m's holder until m's until_ms: each
// one not recorded and not held by another holder past m's now_ms (a
// holder may renew its own). Holds stay sorted by seq and bounded: past
// maxInboxSeen of them a new seq is not taken (its server refuses it
// retryably).
func takeInbox(in *concordv1.FedInbox, m *concordv1.FedInboxMark) {
	for _, q := range m.GetTakeSeqs() {
		if _, seen := slices.BinarySearch(in.Seen, q); seen || q < in.GetFloor() {
			continue
		}
		i, found := slices.BinarySearchFunc(in.Takes, q, func(t *concordv1.FedInboxTake, q uint64) int { return cmp.Compare(t.GetSeq(), q) })
		switch {
		case !found && len(in.Takes) >= maxInboxSeen:
		case !found:
			in.Takes = slices.Insert(in.Takes, i, &concordv1.FedInboxTake{Seq: q, Holder: m.GetHolder(), UntilMs: m.GetUntilMs()})
		case in.Takes[i].GetHolder() == m.GetHolder() || in.Takes[i].GetUntilMs() <= m.GetNowMs():
			in.Takes[i] = &concordv1.FedInboxTake{Seq: q, Holder: m.GetHolder(), UntilMs: m.GetUntilMs()}
		}
	}
}

func (s *State) applyUnlinkDone(m *concordv1.FedUnlinkDone) error {
	delete(s.pending, m.GetPeerSystemId())
	return nil
}

// applyDirectoryChunk stages one chunk of a directory update and applies
// the whole with the last one. Chunks of an update already applied (a
// second importer's) change nothing.
func (s *State) applyDirectoryChunk(u *concordv1.FedDirectoryApply) error {
	peer := u.GetPeerSystemId()
	if _, ok := s.links[peer]; !ok {
		return fmt.Errorf("%w: %s", ErrNoLink, peer)
	}
	if cur := s.imported[peer]; cur != nil && u.GetVersion() <= cur.GetVersion() {
		return nil
	}
	st := s.staging[peer]
	sameUpdate := st != nil && st.GetVersion() == u.GetVersion() && st.GetBaseVersion() == u.GetBaseVersion() && st.GetFull() == u.GetFull()
	switch {
	case u.GetChunk() == 0:
		if !u.GetMore() {
			s.dropStaging(peer)
			return s.applyDirectory(u)
		}
		if sameUpdate {
			return nil // the same first chunk again
		}
		s.staging[peer] = proto.CloneOf(u)
		s.stagedBytes[peer] = stagedSize(u)
		return nil
	case sameUpdate && u.GetChunk() <= st.GetChunk():
		return nil // a chunk staged already
	case !sameUpdate || u.GetChunk() != st.GetChunk()+1:
		return fmt.Errorf("%w: chunk %d of version %d out of sequence", ErrDirectoryGap, u.GetChunk(), u.GetVersion())
	}
	n := s.stagedBytes[peer] + stagedSize(u)
	if n > maxStagedBytes {
		s.dropStaging(peer)
		return fmt.Errorf("%w: directory update from %s over %d bytes", ErrInvalidCommand, peer, maxStagedBytes)
	}
	s.stagedBytes[peer] = n
	for _, a := range u.GetUpserts() {
		st.Upserts = append(st.Upserts, proto.CloneOf(a))
	}
	st.Removes = append(st.Removes, u.GetRemoves()...)
	st.Chunk, st.More, st.Digest = u.GetChunk(), u.GetMore(), u.GetDigest()
	if st.GetMore() {
		return nil
	}
	s.dropStaging(peer)
	return s.applyDirectory(st)
}

// stagedSize is what a staged update weighs against maxStagedBytes: its
// agents and removed ids (the same sum live and after a restore).
func stagedSize(u *concordv1.FedDirectoryApply) int {
	n := 0
	for _, a := range u.GetUpserts() {
		n += proto.Size(a)
	}
	for _, id := range u.GetRemoves() {
		n += len(id)
	}
	return n
}

func (s *State) dropStaging(peer string) {
	delete(s.staging, peer)
	delete(s.stagedBytes, peer)
}

// OutboxPending returns up to n messages of the outbox to peer, oldest
// first, and the outbox's floor: its oldest seq (everything below was
// acknowledged). pick (nil: take every one) says of each seq whether to
// take it and whether to stop there, before it (a prefix of what is left).
func (s *State) OutboxPending(peer string, n int, pick func(seq uint64) (take, stop bool)) (out []*concordv1.FedOutboxEntry, floor uint64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ob := s.outbox[peer]
	floor = ob.GetNextSeq()
	if es := ob.GetEntries(); len(es) > 0 {
		floor = es[0].GetSeq()
	}
	for _, e := range ob.GetEntries() {
		if len(out) == n {
			break
		}
		take, stop := true, false
		if pick != nil {
			take, stop = pick(e.GetSeq())
		}
		if stop {
			break
		}
		if take {
			out = append(out, proto.CloneOf(e))
		}
	}
	return out, floor
}

// OutboxHas reports whether the outbox to peer still holds seq.
func (s *State) OutboxHas(peer string, seq uint64) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	es := s.outbox[peer].GetEntries()
	_, found := slices.BinarySearchFunc(es, seq, func(e *concordv1.FedOutboxEntry, q uint64) int { return cmpUint(e.GetSeq(), q) })
	return found
}

// OutboxSize returns how many messages and bytes wait for peer.
func (s *State) OutboxSize(peer string) (int, uint64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ob := s.outbox[peer]
	return len(ob.GetEntries()), ob.GetBytes()
}

// InboxDone reports whether the guaranteed message seq from source was
// processed already.
func (s *State) InboxDone(source string, seq uint64) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	in := s.inbox[source]
	if in == nil {
		return false
	}
	if seq < in.GetFloor() {
		return true
	}
	_, found := slices.BinarySearch(in.GetSeen(), seq)
	return found
}

// InboxHolder returns the holder of the guaranteed message seq from
// source (FedInboxMark.take_seqs) and until when; "" when none holds it.
func (s *State) InboxHolder(source string, seq uint64) (string, int64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	takes := s.inbox[source].GetTakes()
	i, found := slices.BinarySearchFunc(takes, seq, func(t *concordv1.FedInboxTake, q uint64) int { return cmp.Compare(t.GetSeq(), q) })
	if !found {
		return "", 0
	}
	return takes[i].GetHolder(), takes[i].GetUntilMs()
}

// InboxGaps returns the seqs in [from, to) from source not recorded in
// the inbox, oldest first, and whether that is all of them: at most limit
// are returned (a peer's seq is outside input, so the walk stays bounded
// by the recorded seqs plus limit).
func (s *State) InboxGaps(source string, from, to uint64, limit int) ([]uint64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	in := s.inbox[source]
	seen := in.GetSeen()
	q := max(from, in.GetFloor())
	i, _ := slices.BinarySearch(seen, q)
	var gaps []uint64
	for ; q < to; q++ {
		if i < len(seen) && seen[i] == q {
			i++
			continue
		}
		if len(gaps) == limit {
			return gaps, false
		}
		gaps = append(gaps, q)
	}
	return gaps, true
}

// PendingUnlinks returns copies of the unlinks a peer has not confirmed,
// by peer id.
func (s *State) PendingUnlinks() []*concordv1.FedPendingUnlink {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*concordv1.FedPendingUnlink, 0, len(s.pending))
	for _, k := range sortedKeys(s.pending) {
		out = append(out, proto.CloneOf(s.pending[k]))
	}
	return out
}

// OnAck sets the hook that hears the messages every applied outbox ack
// removed.
func (s *State) OnAck(fn func(peer string, acked []Acked)) {
	s.mu.Lock()
	s.onAck = fn
	s.mu.Unlock()
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
