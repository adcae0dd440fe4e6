package rpc

import (
	"sync"
	"time"
)

// keepalives schedules every WebSocket connection's keepalive ping in the
// process on one timer. A time.Timer per connection (AfterFunc) cost an
// idle session ~170 bytes plus an entry in the runtime's timer heap
// (issue 10); a place in this list costs the three fields of pingEntry.
//
// The list is ordered by due time. A connection re-arms with its own
// Config.PingInterval, so with one interval in the process (the usual
// case) every arm appends at the tail; other intervals insert by walking
// back from the tail. The timer fires for the head and asks for a ping on
// every connection whose ping may come now, so connections that connected
// together are pinged together: a ping comes at most pingBatch (and at
// most an eighth of its interval) early, never late (the peer's pong
// deadline, PingInterval+PongTimeout after its last pong, is
// unaffected). No goroutine of its own: the timer's callback runs on the
// runtime's short-lived timer goroutine.
var keepalives pingSchedule

// pingBatch bounds how early a ping may be sent to share a timer firing.
const pingBatch = 100 * time.Millisecond

// clockStart is the origin of pingEntry's times: monotonic durations
// since it take 8 bytes where a time.Time takes 24.
var clockStart = time.Now()

func monoNow() time.Duration { return time.Since(clockStart) }

// pingSchedule is the list described at keepalives. mu guards every
// pingEntry of the connections in it, head, tail and timer.
type pingSchedule struct {
	mu         sync.Mutex
	head, tail *Conn
	timer      *time.Timer // made on first use; stopped while the list is empty
	timerAt    time.Duration
	timerArmed bool // timer fires at timerAt
}

// pingEntry is a connection's place in keepalives: its ping is due at
// due and may come from early on (times are monoNow values; due is 0
// when not scheduled, as PingInterval is positive).
type pingEntry struct {
	prev, next *Conn
	due, early time.Duration
}

// arm schedules c's next ping d from now, replacing any earlier schedule.
func (s *pingSchedule) arm(c *Conn, d time.Duration) {
	now := monoNow()
	due := now + d
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unlinkLocked(c)
	c.ping = pingEntry{due: due, early: due - min(pingBatch, d/8)}
	at := s.tail
	for at != nil && at.ping.due > due {
		at = at.ping.prev
	}
	if at == nil { // the new head
		c.ping.next = s.head
		if s.head != nil {
			s.head.ping.prev = c
		}
		s.head = c
		if s.tail == nil {
			s.tail = c
		}
		s.resetLocked(now)
		return
	}
	c.ping.prev, c.ping.next = at, at.ping.next
	if at.ping.next != nil {
		at.ping.next.ping.prev = c
	} else {
		s.tail = c
	}
	at.ping.next = c
}

// disarm takes c off the schedule (teardown). A ping already requested
// may still reach c's queue, as after stopping a timer whose function had
// started.
func (s *pingSchedule) disarm(c *Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unlinkLocked(c)
	if s.head == nil && s.timer != nil && s.timerArmed {
		s.timer.Stop()
		s.timerArmed = false
	}
}

func (s *pingSchedule) unlinkLocked(c *Conn) {
	if c.ping.due == 0 {
		return
	}
	if c.ping.prev != nil {
		c.ping.prev.ping.next = c.ping.next
	} else {
		s.head = c.ping.next
	}
	if c.ping.next != nil {
		c.ping.next.ping.prev = c.ping.prev
	} else {
		s.tail = c.ping.prev
	}
	c.ping = pingEntry{}
}

// resetLocked points the timer at the head's due time, unless it already
// fires by then.
func (s *pingSchedule) resetLocked(now time.Duration) {
	if s.head == nil {
		return
	}
	due := s.head.ping.due
	if s.timerArmed && s.timerAt <= due {
		return
	}
	s.timerAt, s.timerArmed = due, true
	if s.timer == nil {
		s.timer = time.AfterFunc(due-now, s.fire)
		return
	}
	s.timer.Reset(due - now)
}

// fire asks the connections at the head of the list whose ping may come
// now for one; each re-arms once its writer sent it. One whose ping may
// not come yet ends the walk: those behind it are due no earlier than
// it, and the timer is reset for it.
func (s *pingSchedule) fire() {
	now := monoNow()
	var due []*Conn
	s.mu.Lock()
	s.timerArmed = false
	for c := s.head; c != nil && c.ping.early <= now; c = s.head {
		s.unlinkLocked(c)
		due = append(due, c)
	}
	s.resetLocked(now)
	s.mu.Unlock()
	for _, c := range due {
		c.q.requestPing()
	}
}

// scheduled reports whether c is in the list (tests).
func (s *pingSchedule) scheduled(c *Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return c.ping.due != 0
}
