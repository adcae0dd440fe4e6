package registry

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// levelHandler applies COMMAND_TYPE_SYSTEM_FSM_LEVEL: the recorded level
// becomes the larger of the two (it never goes down), or, above this
// build's level, the FSM halts before anything changes.
func (s *State) levelHandler() raftstore.Handler {
	return raftstore.Handler{
		New: func() proto.Message { return new(concordv1.SystemFSMLevel) },
		Apply: func(index uint64, msg proto.Message) (any, error) {
			m, ok := msg.(*concordv1.SystemFSMLevel)
			if !ok {
				panic(fmt.Sprintf("registry: level handler got unexpected message type %T", msg))
			}
			if err := s.levelFits(m.GetLevel()); err != nil {
				return nil, err
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			s.d.systemLevel = max(s.d.systemLevel, m.GetLevel())
			return nil, nil
		},
	}
}

// levelFits refuses, as a halt, a recorded level this build does not
// enforce.
func (s *State) levelFits(level uint32) error {
	if int64(level) <= int64(s.build) {
		return nil
	}
	return fmt.Errorf("%w (%w): the system enforces FSM level %d and this build only %d; "+
		"it was downgraded in place (unsupported): run a build of level %d or newer on this node",
		ErrFSMLevelAhead, raftstore.ErrHalt, level, s.build, level)
}

// SystemFSMLevel is the FSM level recorded in replicated state (0: none
// recorded yet).
func (s *State) SystemFSMLevel() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return int(s.d.systemLevel)
}

// BuildFSMLevel is the FSM level this State enforces (Config.BuildFSMLevel).
func (s *State) BuildFSMLevel() int { return s.build }
