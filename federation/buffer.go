package federation

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// DefaultBufferPolicy is the SDK's outage buffer: 1,000 messages, 10 MB,
// 1 h, drop-oldest.
func DefaultBufferPolicy() *concordv1.FedBufferPolicy {
	return &concordv1.FedBufferPolicy{MaxMessages: 1000, MaxBytes: 10 << 20, MaxAgeMs: int64(time.Hour / time.Millisecond),
		Overflow: concordv1.FedOverflow_FED_OVERFLOW_DROP_OLDEST}
}

// BufferPolicyOr completes p with the defaults (nil: all defaults) and
// checks it.
func BufferPolicyOr(p *concordv1.FedBufferPolicy) (*concordv1.FedBufferPolicy, error) {
	out := DefaultBufferPolicy()
	if p == nil {
		return out, nil
	}
	if p.GetMaxAgeMs() < 0 {
		return nil, fmt.Errorf("%w: buffer age must be >= 0", ErrInvalidCommand)
	}
	if p.GetMaxMessages() > 0 {
		out.MaxMessages = p.GetMaxMessages()
	}
	if p.GetMaxBytes() > 0 {
		out.MaxBytes = p.GetMaxBytes()
	}
	if p.GetMaxAgeMs() > 0 {
		out.MaxAgeMs = p.GetMaxAgeMs()
	}
	if p.GetOverflow() != concordv1.FedOverflow_FED_OVERFLOW_UNSPECIFIED {
		out.Overflow = p.GetOverflow()
	}
	return out, nil
}

// Outcome is what became of one message handed to a link.
type Outcome struct {
	// Delivered lists the recipients the peer reached (its ack).
	Delivered []string
	// Queued is true when the message waits in the outage buffer.
	Queued bool
	// Err is a refusal (*CodeError) when neither.
	Err *CodeError
}

// item is one message waiting for the stream.
type item struct {
	env  *concordv1.FedEnvelope
	size int
	at   time.Time
	// done reports the outcome to the sender; nil once the sender was
	// told "queued" (the message then drains without a waiter).
	done func(Outcome)
}

// buffer is a link's FIFO of messages not yet on the wire, bounded by the
// link's policy. It is not safe for concurrent use: the link's mutex
// guards it.
type buffer struct {
	items   []*item
	bytes   int
	dropped uint64
}

// push adds it, applying the overflow policy; it returns the items that
// were dropped to make room (to be told), or refuse when it must not be
// added.
func (b *buffer) push(it *item, p *concordv1.FedBufferPolicy, now time.Time) (dropped []*item, refuse *CodeError) {
	dropped = b.expire(p, now)
	if p.GetMaxBytes() > 0 && uint64(it.size) > p.GetMaxBytes() {
		// It could never fit: refuse it without evicting anything.
		b.dropped++
		return dropped, codeErr(CodeUnavailable, "message larger than the federation buffer", nil)
	}
	for b.full(p, it.size) {
		switch p.GetOverflow() {
		case concordv1.FedOverflow_FED_OVERFLOW_REJECT_NEW:
			return dropped, codeErr(CodeUnavailable, "Federation link down and its buffer is full (reject-new)", map[string]any{"retryable": true})
		case concordv1.FedOverflow_FED_OVERFLOW_DROP_NEWEST:
			b.dropped++
			return dropped, codeErr(CodeUnavailable, "Federation link down and its buffer is full: message dropped (drop-newest)", map[string]any{"retryable": true})
		default: // drop-oldest
			dropped = append(dropped, b.popFront())
			b.dropped++
		}
	}
	b.items = append(b.items, it)
	b.bytes += it.size
	return dropped, nil
}

func (b *buffer) full(p *concordv1.FedBufferPolicy, size int) bool {
	return (p.GetMaxMessages() > 0 && len(b.items)+1 > int(p.GetMaxMessages())) ||
		(p.GetMaxBytes() > 0 && uint64(b.bytes+size) > p.GetMaxBytes())
}

// expire drops items older than the policy's age bound.
func (b *buffer) expire(p *concordv1.FedBufferPolicy, now time.Time) []*item {
	if p.GetMaxAgeMs() <= 0 {
		return nil
	}
	limit := now.Add(-time.Duration(p.GetMaxAgeMs()) * time.Millisecond)
	var out []*item
	for len(b.items) > 0 && b.items[0].at.Before(limit) {
		out = append(out, b.popFront())
		b.dropped++
	}
	return out
}

func (b *buffer) popFront() *item {
	it := b.items[0]
	b.items[0] = nil
	b.items = b.items[1:]
	b.bytes -= it.size
	return it
}

// takeAll empties the buffer in order.
func (b *buffer) takeAll() []*item {
	out := b.items
	b.items, b.bytes = nil, 0
	return out
}

func envSize(env *concordv1.FedEnvelope) int { return proto.Size(env) }

// tell reports o to the sender of every item still waiting for one.
func tell(items []*item, o Outcome) {
	for _, it := range items {
		if it.done != nil {
			it.done(o)
		}
	}
}

// detachWaiting returns the senders still waiting on items and forgets
// them: each is told "queued" once and the message drains without a
// waiter. Caller holds the lock that guards items.
func detachWaiting(items []*item) []func(Outcome) {
	var out []func(Outcome)
	for _, it := range items {
		if it.done != nil {
			out = append(out, it.done)
			it.done = nil
		}
	}
	return out
}

func tellQueued(waiting []func(Outcome)) {
	for _, d := range waiting {
		d(Outcome{Queued: true})
	}
}

// errDropped is told to a waiting sender whose message aged out or was
// pushed out of the buffer.
func errDropped() *CodeError {
	return codeErr(CodeUnavailable, "Federation link down: message dropped from the outage buffer", map[string]any{"retryable": true})
}
