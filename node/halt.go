package node

import (
	"context"
)

// A node whose build enforces a lower FSM level than the one recorded in
// replicated state (registry.FSMLevelSystemRecord; a downgrade in place)
// halts its FSM rather than apply the log differently from the other
// replicas (raftstore.ErrHalt): it applies nothing more, answers /v1/ready
// 503 naming the cause, refuses new MAP connections, and closes Fatal, on
// which concord server shuts it down and exits non-zero. A halt found while
// starting (a snapshot or replayed entry recording the level) fails Start.

// watchHalt waits for the FSM to halt (or ctx) and then closes Fatal.
func (s *Server) watchHalt(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-s.store.Halted():
	}
	err := s.store.HaltErr()
	s.caughtUp.Store(false) // new MAP connections are refused (gateUntilCaughtUp)
	s.closeFatal(err)
	s.log.Error("node halted: its FSM cannot apply the log like the other replicas; it serves nothing more. "+
		"Run a build whose FSM level is at least the system's (concord operator health shows it) on this node", "err", err)
	return nil
}

// closeFatal records err as why the node cannot go on and closes Fatal;
// the first call wins. Start calls it too when it fails on a halt, so a
// caller that sees Start fail that way also sees Fatal closed, whether or
// not watchHalt ran yet.
func (s *Server) closeFatal(err error) {
	s.fatalOnce.Do(func() {
		s.fatalErr = err
		close(s.fatal)
	})
}

// Fatal is closed when the node cannot go on and must be shut down (its
// FSM halted); FatalErr then says why.
func (s *Server) Fatal() <-chan struct{} { return s.fatal }

// FatalErr is why Fatal closed, nil before.
func (s *Server) FatalErr() error {
	select {
	case <-s.fatal:
		return s.fatalErr
	default:
		return nil
	}
}
