// Package backoff computes retry delays shared by the node's reconnecting
// parts (gossip join, MAP clients, the stdio bridge): exponential growth,
// a cap, and "equal jitter" so that peers which failed together do not
// retry in step.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Delay returns the pause before retry number attempt (0-based): base
// doubled per attempt, capped at limit, half of it fixed and half
// uniformly random. The fixed half keeps a delay from collapsing to zero.
// r is the random source (a seeded one makes tests reproducible); nil uses
// the global one.
func Delay(attempt int, base, limit time.Duration, r *rand.Rand) time.Duration {
	d := base
	for i := 0; i < attempt && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	half := d / 2
	n := int64(half) + 1
	if r != nil {
		return d - half + time.Duration(r.Int64N(n))
	}
	return d - half + time.Duration(rand.Int64N(n))
}
