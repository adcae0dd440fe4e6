package rpc

import (
	"context"
	"time"
)

// shutdownGoodbyeGrace is how long a server's Shutdown lets a connection
// whose close has begun write its goodbye: the frames queued before the
// close and the close frame. A client that reads takes them in a round
// trip or a few; one that stopped reading (a frozen process, a cut-off
// network) would hold the write WriteTimeout (10 s by default), and with
// it the node's whole shutdown. A connection still inside a handler has
// not begun its close and is waited for as before (until ctx).
const shutdownGoodbyeGrace = time.Second

// awaitGoodbyes waits for allDone (every connection ended) or ctx,
// cutting each connection whose goodbye has been stuck for
// shutdownGoodbyeGrace. It reports whether every connection ended.
func (s *Server) awaitGoodbyes(ctx context.Context, allDone <-chan struct{}) bool {
	tick := time.NewTicker(shutdownGoodbyeGrace / 4)
	defer tick.Stop()
	stuckSince := map[*Conn]time.Time{}
	for {
		select {
		case <-allDone:
			return true
		case <-ctx.Done():
			return false
		case now := <-tick.C:
			for _, c := range s.connsAfter(func() {}) {
				if !c.goodbyeStuck() {
					delete(stuckSince, c)
					continue
				}
				since, seen := stuckSince[c]
				switch {
				case !seen:
					stuckSince[c] = now
				case now.Sub(since) >= shutdownGoodbyeGrace:
					c.debug("goodbye not out within the shutdown grace: cutting the connection", "grace", shutdownGoodbyeGrace)
					delete(stuckSince, c)
					c.abort()
				}
			}
		}
	}
}

// goodbyeStuck reports whether c's close has begun (no handler holds it)
// but its goodbye has not gone out yet and it has not ended.
func (c *Conn) goodbyeStuck() bool {
	c.mu.Lock()
	closing := c.closing
	c.mu.Unlock()
	if !closing {
		return false
	}
	select {
	case <-c.lazyChan(&c.goodbyeOut):
		return false
	case <-c.lazyChan(&c.done):
		return false
	default:
		return true
	}
}
