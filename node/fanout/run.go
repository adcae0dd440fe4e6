package fanout

import (
	"context"
	"sync"
	"time"

	"github.com/concordmap/concord/node/registry"
)

// Run tails the replicated event log and delivers to the local
// subscriptions until ctx is done; it also owns the cursor-flush goroutine
// and waits for it (a last flush is attempted on the way out). Call it once.
//
// One loop serves every subscription: a subscription whose connection is
// full is simply left behind at its log position and retried every
// RetryInterval, so no connection can stall the others.
func (h *Hub) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		h.cursorLoop(ctx)
	}()
	defer wg.Wait()

	retry := time.NewTimer(h.cfg.RetryInterval)
	retry.Stop()
	defer retry.Stop()
	for {
		// Take the notify channel before reading, so an event appended
		// while we deliver wakes the next round.
		notify := h.reg.Notify()
		res := h.step()
		if res == pumpAgain {
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		var retryC <-chan time.Time
		if res == pumpRetry {
			retry.Reset(h.cfg.RetryInterval)
			retryC = retry.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-notify:
			if h.cfg.WaitApplyBatch != nil {
				h.cfg.WaitApplyBatch(ctx)
			}
		case <-h.wake:
		case <-retryC:
		}
		retry.Stop()
	}
}

// step gives every subscription one turn and reports the most urgent need.
func (h *Hub) step() pumpResult {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	oldest, last := h.reg.Window()
	if len(h.subs) > 0 {
		// With nobody subscribed (most servers, most of the time) each
		// event would be read and encoded for no one; a later subscriber
		// refills the cache (refill handles the gap).
		h.cache.refill(h.reg, last)
	}
	res := pumpIdle
	if h.retryNotices() {
		res = pumpRetry
	}
	for _, s := range h.subs {
		if r := h.pump(s, oldest, last, now); r > res {
			res = r
		}
	}
	return res
}

// eventCache keeps the newest prepared log events (contiguous positions),
// so the subscriptions that keep up share one read and one encoding of
// each event. Guarded by Hub.mu.
type eventCache struct {
	limit int
	evs   []*prepared
}

func (c *eventCache) bounds() (first, end uint64) {
	if len(c.evs) == 0 {
		return 0, 0
	}
	return c.evs[0].ev.Position, c.evs[len(c.evs)-1].ev.Position
}

// refill appends the events up to last (at most limit of the newest).
func (c *eventCache) refill(reg registry.Reader, last uint64) {
	_, end := c.bounds()
	if last <= end {
		return
	}
	from := end
	if last-end > uint64(c.limit) {
		from = last - uint64(c.limit)
	}
	evs := reg.EventsAfter(from, int(last-from))
	if len(evs) == 0 {
		return
	}
	if len(c.evs) > 0 && evs[0].Position != end+1 {
		c.evs = nil // discontinuity (window moved past us, or a snapshot restore)
	}
	for _, ev := range evs {
		c.evs = append(c.evs, prepare(ev, false))
	}
	if len(c.evs) > 2*c.limit {
		c.evs = append([]*prepared(nil), c.evs[len(c.evs)-c.limit:]...)
	}
}

// after returns up to n events after pos: from the cache when it covers
// pos, else read (and prepared, uncached) from the registry.
func (c *eventCache) after(reg registry.Reader, pos uint64, n int) []*prepared {
	if first, end := c.bounds(); len(c.evs) > 0 && pos+1 >= first && pos < end {
		i := int(pos + 1 - first)
		return c.evs[i:min(i+n, len(c.evs))]
	}
	evs := reg.EventsAfter(pos, n)
	out := make([]*prepared, len(evs))
	for i, ev := range evs {
		out[i] = prepare(ev, false)
	}
	return out
}
