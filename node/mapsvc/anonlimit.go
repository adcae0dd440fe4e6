package mapsvc

import (
	"container/list"
	"net"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/concordmap/concord/node/rpc"
)

// Anonymous session admission. Every new session is a replicated write
// that a detached session keeps for DetachedSessionTTL, so a caller
// without a credential looping connect/disconnect could grow replicated
// state without bound. anonSessionLimiter gives each client address a
// token bucket of new anonymous sessions on this node; authenticated
// participants and resumes never draw from it.

// maxAnonLimiterIPs caps the addresses tracked at once: past it the least
// recently seen is forgotten, so an attacker with many addresses cannot
// grow the table (forgetting one gives that address a full bucket again,
// which it would also get by waiting burst/rate).
const maxAnonLimiterIPs = 10_000

// LimitAnonymousSessions names the limit in the 4001 details.
const LimitAnonymousSessions = "anonymousSessionsPerSecond"

type anonSessionLimiter struct {
	limit rate.Limit
	burst int
	max   int           // addresses tracked at most
	full  time.Duration // idle time after which a bucket is full again

	mu   sync.Mutex
	byIP map[string]*list.Element // of *anonBucket
	lru  list.List                // front: most recently seen
}

type anonBucket struct {
	key  string
	lim  *rate.Limiter
	seen time.Time
}

// newAnonSessionLimiter returns nil (no limit) when perSecond <= 0.
func newAnonSessionLimiter(perSecond float64, burst, maxIPs int) *anonSessionLimiter {
	if perSecond <= 0 {
		return nil
	}
	burst = max(burst, 1)
	return &anonSessionLimiter{
		limit: rate.Limit(perSecond),
		burst: burst,
		max:   max(maxIPs, 1),
		full:  time.Duration(float64(burst) / perSecond * float64(time.Second)),
		byIP:  make(map[string]*list.Element),
	}
}

// allow takes one token from key's bucket at now. When none is left it
// returns false and how long until one is.
func (l *anonSessionLimiter) allow(key string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evictIdle(now)
	var b *anonBucket
	if e, ok := l.byIP[key]; ok {
		b = e.Value.(*anonBucket)
		l.lru.MoveToFront(e)
	} else {
		if len(l.byIP) >= l.max {
			oldest := l.lru.Back()
			l.lru.Remove(oldest)
			delete(l.byIP, oldest.Value.(*anonBucket).key)
		}
		b = &anonBucket{key: key, lim: rate.NewLimiter(l.limit, l.burst)}
		l.byIP[key] = l.lru.PushFront(b)
	}
	b.seen = now
	if b.lim.AllowN(now, 1) {
		return true, 0
	}
	missing := 1 - b.lim.TokensAt(now)
	return false, time.Duration(missing / float64(l.limit) * float64(time.Second))
}

// evictIdle forgets addresses idle long enough for their bucket to be
// full again: forgetting them changes no decision.
func (l *anonSessionLimiter) evictIdle(now time.Time) {
	for e := l.lru.Back(); e != nil; e = l.lru.Back() {
		b := e.Value.(*anonBucket)
		if now.Sub(b.seen) < l.full {
			return
		}
		l.lru.Remove(e)
		delete(l.byIP, b.key)
	}
}

// size returns the addresses tracked (for tests).
func (l *anonSessionLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byIP)
}

// anonLimitKey is the bucket of a connection's remote address: its IP, or
// its /64 for IPv6 (one host commonly holds a whole /64). ok is false for
// connections without a network address (stdio, in-process): those are
// local callers, not limited.
func anonLimitKey(remote string) (key string, ok bool) {
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return "", false
	case ip.To4() != nil:
		return ip.To4().String(), true
	default:
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64", true
	}
}

// anonSessionRefusal refuses a new session for an anonymous principal
// whose address is over Config.AnonymousSessionRate: 4001, retryable,
// with retryAfterMs. A connect is charged once (cp.anonCharged): the
// resume of a session this replica does not know is charged before its
// catch-up barrier (a Raft write on a follower), and then starts afresh
// without a second charge.
func (s *Service) anonSessionRefusal(remote string, pr *Principal, cp *connectParams) error {
	if s.anonLimit == nil || pr == nil || !pr.Anonymous() || cp.anonCharged {
		return nil
	}
	key, ok := anonLimitKey(remote)
	if !ok {
		return nil
	}
	allowed, wait := s.anonLimit.allow(key, s.cfg.Clock())
	if allowed {
		cp.anonCharged = true
		return nil
	}
	e := rpc.NewError(rpc.CodeRateLimited, "Too many new anonymous sessions from this address").
		WithRetryAfter(max(wait, time.Millisecond))
	s.log.Debug("anonymous session refused: rate limit", "peer", remote, "retry_after_ms", e.Data.RetryAfterMs)
	return e.WithDetails(map[string]any{"limit": LimitAnonymousSessions, "max": s.cfg.AnonymousSessionRate,
		"burst": s.anonLimit.burst, "retryAfterMs": e.Data.RetryAfterMs})
}
