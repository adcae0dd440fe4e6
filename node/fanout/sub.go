package fanout

import (
	"time"
)

// sub is one subscription delivering on this node. All fields are guarded
// by Hub.mu.
type sub struct {
	id, sessionID, participantID string
	participantType              string // with participantID, who Config.Visible decides for
	// epoch is the attach epoch of the session's connection delivering
	// here: its cursor and removal writes quote it (Hub.quoteEpochs).
	epoch  uint64
	filter *filter
	opts   options

	// Registry events are read from the replicated log: pos is the last
	// log position this subscription has handled (delivered or filtered
	// out); nothing after it has been looked at yet.
	pos uint64
	seq uint64 // last sequenceNumber sent

	// Cursor: lastRegID is the last registry event handed to the
	// connection; once the client acknowledges, ackedID (the last registry
	// event at or before the acknowledged one) is used instead.
	lastRegID  string
	ackedID    string
	ackedSeq   uint64 // 0: never acknowledged
	flushedSeq uint64 // seq of the last cursor proposed
	recent     ackRing

	queue      []*prepared // ephemeral events the connection had no room for
	queueBytes int         // sum of len(body) over queue
	blocked    bool        // the connection refused the last send: retry on the next tick
	// activeAt holds delivery back until the subscribe/connect reply is out
	// (zero: active). afterReply: activation waits for Config.AfterReply.
	activeAt   time.Time
	afterReply bool
	ovf        overflow
}

func (s *sub) active(now time.Time) bool {
	return !s.afterReply && !now.Before(s.activeAt)
}

// cursor is what would be persisted now.
func (s *sub) cursor() (eventID string, seq uint64) {
	if s.ackedSeq > 0 {
		return s.ackedID, s.seq
	}
	return s.lastRegID, s.seq
}

// overflow tracks one episode of dropped events, from the first drop until
// the subscription has fully caught up again.
type overflow struct {
	due                bool   // a warning is to be sent
	gap                bool   // the warning covers events that aged out of the log (count unknown)
	dropped            int    // dropped since the last warning was sent
	total              int    // dropped over the subscription's life on this node
	oldestID, newestID string // of the events counted in dropped ("" if unknown: aged out of the log)
	since              time.Time
	warned             bool // a warning reached the connection during this episode
}

func (o *overflow) add(n int, oldestID, newestID string, now time.Time) {
	if o.since.IsZero() {
		o.since = now
	}
	o.due = true
	if o.dropped == 0 || o.oldestID == "" {
		o.oldestID = oldestID
	}
	if newestID != "" {
		o.newestID = newestID
	}
	o.dropped += n
	o.total += n
}

// ackRing remembers the last deliveries so an acknowledgement (by
// sequence number or event id) can be mapped to a registry event.
type ackRing struct {
	entries [ackRingSize]ackEntry
}

const ackRingSize = 256

type ackEntry struct {
	seq     uint64
	eventID string // the delivered event
	regID   string // the last registry event delivered at or before it
}

func (r *ackRing) push(e ackEntry) { r.entries[e.seq%ackRingSize] = e }

func (r *ackRing) bySeq(seq uint64) (ackEntry, bool) {
	e := r.entries[seq%ackRingSize]
	return e, seq != 0 && e.seq == seq
}

func (r *ackRing) byEventID(id string) (ackEntry, bool) {
	var best ackEntry
	for _, e := range r.entries {
		if e.seq != 0 && e.eventID == id && e.seq > best.seq {
			best = e
		}
	}
	return best, best.seq != 0
}
