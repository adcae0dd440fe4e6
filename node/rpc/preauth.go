package rpc

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// closePolicy is WebSocket status 1008: the peer broke a server policy
// (here: it did not authenticate in time).
const closePolicy = 1008

// preAuthGate counts the network connections (WebSockets and HTTP sessions)
// that have not authenticated yet, globally and per client IP. Anonymous
// peers can only hold these slots, for at most PreAuthTimeout each, so a
// flood from one address cannot lock out the others and a flood from many
// drains within one timeout.
type preAuthGate struct {
	max, maxPerIP int

	mu    sync.Mutex
	total int
	perIP map[string]int
}

func newPreAuthGate(max, maxPerIP int) *preAuthGate {
	return &preAuthGate{max: max, maxPerIP: maxPerIP, perIP: make(map[string]int)}
}

// acquire takes a slot for ip. On refusal it returns the HTTP status to
// answer: 429 when ip holds its share, 503 when the node is full.
func (g *preAuthGate) acquire(ip string) (status int, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.perIP[ip] >= g.maxPerIP:
		return http.StatusTooManyRequests, false
	case g.total >= g.max:
		return http.StatusServiceUnavailable, false
	}
	g.total++
	g.perIP[ip]++
	return 0, true
}

func (g *preAuthGate) release(ip string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.total--
	if g.perIP[ip]--; g.perIP[ip] <= 0 {
		delete(g.perIP, ip)
	}
}

// count returns the slots held (for tests).
func (g *preAuthGate) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.total
}

// clientIP is the host part of a RemoteAddr ("1.2.3.4:5678" -> "1.2.3.4").
func clientIP(remote string) string {
	if host, _, err := net.SplitHostPort(remote); err == nil {
		return host
	}
	return remote
}

// refusePreAuth answers an upgrade or session-opening request the gate
// refused, telling the client when to retry.
func refusePreAuth(w http.ResponseWriter, status int) {
	w.Header().Set("Retry-After", strconv.Itoa(1))
	http.Error(w, "too many unauthenticated connections", status)
}

// preAuth is one connection's hold on a gate slot, plus the timer that
// closes the connection if it never authenticates.
type preAuth struct {
	gate  *preAuthGate
	ip    string
	timer *time.Timer

	mu   sync.Mutex
	done bool
}

// startPreAuth binds a slot already acquired for ip to c and arms the
// timeout. The slot is released by Authenticated or when c ends.
func (c *Conn) startPreAuth(g *preAuthGate, ip string, timeout time.Duration) {
	p := &preAuth{gate: g, ip: ip}
	c.pre.Store(p)
	p.timer = time.AfterFunc(timeout, func() {
		p.mu.Lock()
		expired := !p.done
		p.mu.Unlock()
		if expired {
			c.logger().Debug("closing connection that did not authenticate in time")
			_ = c.closeWith(closePolicy, "map/connect not received in time")
		}
	})
}

// Authenticated tells the server the peer has authenticated (map/connect
// succeeded): the connection no longer counts against the pre-auth limits
// and the pre-auth timeout no longer applies. Idempotent; a no-op on
// connections that were never limited (stdio, in-process).
func (c *Conn) Authenticated() { c.endPreAuth() }

func (c *Conn) endPreAuth() {
	p := c.pre.Swap(nil)
	if p == nil {
		return
	}
	p.mu.Lock()
	done := p.done
	p.done = true
	p.mu.Unlock()
	if !done {
		p.timer.Stop()
		p.gate.release(p.ip)
	}
}

// ClosePolicy closes like Close but with WebSocket status 1008 (policy
// violation): the server ends the connection for a reason of its own
// rules, such as a revoked or expired credential.
func (c *Conn) ClosePolicy(reason string) error { return c.closeWith(closePolicy, reason) }
