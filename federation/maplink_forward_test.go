package federation

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// MapForward answered on ctx (an envelope's outcome pending: its proxy's
// role ended and it went back to the buffer) leaves no goroutine waiting
// for that outcome.
func TestMapLink_AcceptForwardLeavesNoWaiter(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	m := &Manager{cfg: Config{SystemID: "dc1", NodeID: "n1", MaxEnvelopeBytes: 1 << 20}, now: time.Now, log: discardLogger()}
	l := newMapLink(m, &concordv1.FedLink{PeerSystemId: "ext"})
	ended, cancel := context.WithCancel(context.Background())
	cancel() // the holder's role ended: envelopes go back to the buffer
	l.hold = &holding{l: l, ctx: ended, proxies: map[string]*proxy{}}
	env := &concordv1.FedEnvelope{SourceSystem: "dc1", TargetSystem: "ext", From: "a", ToAgent: "b", MessageId: "m1"}
	ctx, stop := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer stop()
	if _, err := l.acceptForward(ctx, []*concordv1.FedEnvelope{env}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acceptForward with its outcome pending: %v, want the deadline", err)
	}
	if n := len(l.buf.items); n != 1 {
		t.Fatalf("%d envelopes buffered, want the one requeued", n)
	}
}
