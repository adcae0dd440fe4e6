//go:build linux

package wannet

import (
	"sync"
	"time"
)

// Packet is one packet a link delivered, as recorded between
// StartRecording and StopRecording: what a benchmark needs to split a
// round trip into the time each side took and the time on the wire.
type Packet struct {
	// From is the name of the namespace that sent it.
	From string
	// Size is the IP packet's length in bytes.
	Size int
	// Read is when the link took it from the sender's device, Sent when
	// it handed it to the receiver's (after the shape's delay).
	Read, Sent time.Time
	// Late is how long after its due time it was handed over: the
	// emulator's own error.
	Late time.Duration
}

// recorder keeps delivered packets while on, up to a limit.
type recorder struct {
	mu    sync.Mutex
	on    bool
	limit int
	pkts  []Packet
}

func (r *recorder) add(p Packet) {
	r.mu.Lock()
	if r.on && len(r.pkts) < r.limit {
		r.pkts = append(r.pkts, p)
	}
	r.mu.Unlock()
}

// StartRecording makes the link record the next limit packets it
// delivers, both ways, forgetting any earlier recording.
func (l *Link) StartRecording(limit int) {
	l.rec.mu.Lock()
	l.rec.on, l.rec.limit, l.rec.pkts = true, limit, nil
	l.rec.mu.Unlock()
}

// StopRecording ends a recording and returns its packets in delivery
// order per direction.
func (l *Link) StopRecording() []Packet {
	l.rec.mu.Lock()
	defer l.rec.mu.Unlock()
	l.rec.on = false
	out := l.rec.pkts
	l.rec.pkts = nil
	return out
}
