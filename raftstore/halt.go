package raftstore

import "sync"

// halt records the FSM's halt; the first cause wins.
type halt struct {
	once sync.Once
	ch   chan struct{}
	err  error // set before ch closes
}

func (h *halt) init() { h.ch = make(chan struct{}) }

func (h *halt) set(err error) {
	h.once.Do(func() {
		h.err = err
		close(h.ch)
	})
}

// cause is the halt's error, nil while the FSM runs.
func (h *halt) cause() error {
	select {
	case <-h.ch:
		return h.err
	default:
		return nil
	}
}

// Halted is closed once the FSM halted on an ErrHalt; HaltErr then says
// why. The store keeps running (the node stays a Raft member, its log
// intact) but applies nothing more: its owner must report the error and
// stop.
func (s *Store) Halted() <-chan struct{} { return s.fsm.halt.ch }

// HaltErr is the error the FSM halted on, nil while it applies.
func (s *Store) HaltErr() error { return s.fsm.halt.cause() }
