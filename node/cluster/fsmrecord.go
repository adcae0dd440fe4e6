package cluster

import (
	"context"

	"github.com/concordmap/concord/node/registry"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// LevelRecorder is the FSM level state the reconciler reads. Implemented
// by *registry.State.
type LevelRecorder interface {
	// SystemFSMLevel is the level recorded in replicated state (0: none).
	SystemFSMLevel() int
	// BuildFSMLevel is the level this build enforces.
	BuildFSMLevel() int
}

// levelToRecord is the FSM level the leader should record now: the lowest
// level every configured server advertises (never above this leader's
// build), when it is at least FSMLevelSystemRecord (every server then
// knows the record's command type; an older build would panic on it) and
// above the level recorded already (the record only grows).
func levelToRecord(in planInput, build int) (int, bool) {
	l := min(advertisedFloor(in), build)
	return l, l >= registry.FSMLevelSystemRecord && l > in.recorded
}

// recordFSMLevel proposes COMMAND_TYPE_SYSTEM_FSM_LEVEL when levelToRecord
// says so. A failure is logged; the next pass tries again.
func (r *Reconciler) recordFSMLevel(ctx context.Context, in planInput) {
	if r.deps.Levels == nil {
		return
	}
	level, ok := levelToRecord(in, r.deps.Levels.BuildFSMLevel())
	if !ok {
		return
	}
	meta := &concordv1.CommandMeta{TimestampMs: in.now.UnixMilli(), NodeId: r.cfg.NodeID}
	if _, _, err := r.deps.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_SYSTEM_FSM_LEVEL,
		&concordv1.SystemFSMLevel{Meta: meta, Level: uint32(level)}); err != nil {
		r.log.Warn("recording the system FSM level failed; the next pass retries", "level", level, "err", err)
		return
	}
	r.log.Info("system FSM level recorded: every server enforces it, and a build below it now refuses to apply the log",
		"level", level, "was", in.recorded)
}
