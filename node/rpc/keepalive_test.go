package rpc

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// scheduleConn is a Conn with only what the ping schedule touches.
func scheduleConn(name string) *Conn {
	c := &Conn{id: name, q: newSendQueue(8, 1<<20, 1<<20)}
	c.q.startWriter = func() {} // requestPing only marks the ping due here
	return c
}

// order lists the schedule head to tail, checking the back links.
func (s *pingSchedule) order(t *testing.T) []string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	var prev *Conn
	for c := s.head; c != nil; c = c.ping.next {
		if c.ping.prev != prev {
			t.Fatalf("%s: back link to %v, want %v", c.id, c.ping.prev, prev)
		}
		if prev != nil && prev.ping.due > c.ping.due {
			t.Fatalf("%s due before %s but after it in the list", c.id, prev.id)
		}
		out = append(out, c.id)
		prev = c
	}
	if s.tail != prev {
		t.Fatalf("tail %v, want %v", s.tail, prev)
	}
	return out
}

func TestPingSchedule_OrderAndDisarm(t *testing.T) {
	var s pingSchedule
	a, b, c := scheduleConn("a"), scheduleConn("b"), scheduleConn("c")
	steps := []struct {
		do   func()
		want string
	}{
		{func() { s.arm(a, time.Hour) }, "[a]"},
		{func() { s.arm(b, 2*time.Hour) }, "[a b]"},                    // appended
		{func() { s.arm(c, 30*time.Minute) }, "[c a b]"},               // a shorter interval: new head
		{func() { s.arm(a, 3*time.Hour) }, "[c b a]"},                  // re-armed: moved
		{func() { s.arm(c, 150*time.Minute) }, "[b c a]"},              // inserted between
		{func() { s.disarm(c) }, "[b a]"},                              // middle
		{func() { s.disarm(c) }, "[b a]"},                              // twice: nothing
		{func() { s.disarm(a); s.disarm(b) }, "[]"},                    // tail, then the last
		{func() { s.arm(b, time.Hour); s.arm(a, time.Hour) }, "[b a]"}, // equal intervals keep arm order
	}
	for i, st := range steps {
		st.do()
		if got := fmt.Sprint(s.order(t)); got != st.want {
			t.Fatalf("step %d: order %s, want %s", i, got, st.want)
		}
	}
	s.disarm(a)
	s.disarm(b)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timerArmed || s.head != nil {
		t.Fatal("empty schedule keeps its timer armed")
	}
}

// TestPingSchedule_FiresDueOnly: a firing asks for a ping on the
// connections due, and on those due within the batch allowance (an
// eighth of their interval, at most pingBatch), never on later ones,
// which stay scheduled with the timer set for them.
func TestPingSchedule_FiresDueOnly(t *testing.T) {
	var s pingSchedule
	first, batched, later := scheduleConn("first"), scheduleConn("batched"), scheduleConn("later")
	s.arm(first, 400*time.Millisecond)
	s.arm(batched, 420*time.Millisecond) // due after first, but within 420/8 of it

	s.arm(later, time.Hour)
	start := time.Now()
	eventually(t, testTimeout, func() error {
		if s.scheduled(first) {
			return errors.New("first still scheduled")
		}
		return nil
	})
	if el := time.Since(start); el < 350*time.Millisecond {
		t.Fatalf("first pinged after %v, want about its 400ms interval", el)
	}
	for _, c := range []*Conn{first, batched} {
		if s.scheduled(c) || !c.q.takePing() {
			t.Errorf("%s: not pinged in the first firing", c.id)
		}
	}
	if !s.scheduled(later) || later.q.takePing() {
		t.Error("later pinged early")
	}
	if got := fmt.Sprint(s.order(t)); got != "[later]" {
		t.Errorf("left %s, want [later]", got)
	}
	s.mu.Lock()
	armed, at := s.timerArmed, s.timerAt
	s.mu.Unlock()
	if !armed || at != later.ping.due {
		t.Errorf("timer armed %v at %v, want at later's due %v", armed, at, later.ping.due)
	}
	s.disarm(later)
}

// TestPingSchedule_Allocs: arming, re-arming and disarming a connection
// allocate nothing (a timer per connection did).
func TestPingSchedule_Allocs(t *testing.T) {
	var s pingSchedule
	a, b := scheduleConn("a"), scheduleConn("b")
	s.arm(b, time.Hour)
	allocs := testing.AllocsPerRun(100, func() {
		s.arm(a, 2*time.Hour)
		s.arm(a, 3*time.Hour)
		s.disarm(a)
	})
	s.disarm(b)
	if allocs != 0 {
		t.Fatalf("%.0f allocations arming a connection, want 0", allocs)
	}
}
