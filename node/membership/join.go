package membership

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/concordmap/concord/node/internal/backoff"
)

var errOnlySelf = errors.New("no other member reached")

// joinLoop joins JoinAddrs until this node knows another member, then
// closes Joined. Success is judged by the member count rather than by
// Join's result: a seed list usually includes the node itself, and joining
// only oneself must not count, or nodes started together would each form a
// cluster of one. Someone joining us counts too (observe closes Joined,
// which also ends the wait between attempts).
func (m *Membership) joinLoop(ctx context.Context, ml *memberlist.Memberlist, r *rand.Rand) {
	defer m.wg.Done()
	for attempt := 0; ; attempt++ {
		if m.leaving.Load() {
			return // a join now would undo the leave
		}
		if ml.NumMembers() > 1 {
			m.log.Info("joined", "members", ml.NumMembers(), "attempts", attempt)
			m.markJoined()
			return
		}
		n, err := ml.Join(m.cfg.JoinAddrs)
		if ml.NumMembers() > 1 {
			m.log.Info("joined", "members", ml.NumMembers(), "contacted", n, "attempts", attempt+1)
			m.markJoined()
			return
		}
		if err == nil {
			err = errOnlySelf
		}
		delay := backoff.Delay(attempt, m.cfg.JoinRetryInterval, m.cfg.JoinMaxBackoff, r)
		m.log.Warn("join failed, will retry", "attempt", attempt+1, "retry_in", delay, "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			m.log.Warn("join abandoned", "attempts", attempt+1, "err", ctx.Err())
			return
		case <-m.stop:
			t.Stop()
			return
		case <-m.joined:
			t.Stop()
			m.log.Info("joined", "members", ml.NumMembers(), "attempts", attempt+1)
			return
		case <-t.C:
		}
	}
}
