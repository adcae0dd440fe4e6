package mapsvc

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Read-your-writes on this node (raftstore/DESIGN.md, "Returning results
// through the forward"). A write through a follower may be answered with
// the leader's result before this node's replica applied it. The Service
// therefore keeps a fence: the highest Raft index of the writes this node
// answered. Every request first waits until the local replica applied the
// fence, so what it reads here includes every write this node answered
// before the request arrived: the connection's own writes (read-your-writes
// on the node a participant is connected to), a resume on a new
// connection, and another participant's write it heard of from the writer
// — as when every answer waited for the local apply. The fence is raised
// before the write's answer is sent.

// fenceWaitLimit bounds a request's wait for its fence. The fence is
// normally reached within one replication round; a replica that cannot
// reach it sooner has lost its leader (a partition) or lags far behind,
// and the caller is better served by a prompt retryable 4000 (and a
// reconnect elsewhere) than by an answer after its own timeout: a write
// through a cut-off follower fails within about this time too.
const fenceWaitLimit = 2 * time.Second

// fence is the node's read-your-writes index, in two parts: all is the
// highest index of the writes this node answered, strict the highest of
// those that were not neutral (neutralWrite). Methods marked
// fenceTolerant wait for strict only.
type fence struct{ all, strict atomic.Uint64 }

// raise records an answered write at index; neutral writes leave strict.
func (f *fence) raise(index uint64, neutral bool) {
	raiseTo(&f.all, index)
	if !neutral {
		raiseTo(&f.strict, index)
	}
}

// target is the index a request must see applied first.
func (f *fence) target(tolerant bool) uint64 {
	if tolerant {
		return f.strict.Load()
	}
	return f.all.Load()
}

// raiseTo moves v up to index; it never moves down.
func raiseTo(v *atomic.Uint64, index uint64) {
	for {
		cur := v.Load()
		if index <= cur || v.CompareAndSwap(cur, index) {
			return
		}
	}
}

// A neutral write changes nothing that the pre-checks of a fenceTolerant
// method read: an AGENT_UPDATE setting only the agent's state,
// descriptive fields, metadata or environment (not its owner, parent,
// role, visibility, permissions or capabilities, and no lifecycle
// transition). A fenceTolerant method (map/agents/update and the
// lifecycle verbs) reads only who owns the target agent and its
// ancestors, the connection's own state and the ACL module, and answers
// with the leader's result. After neutral writes, such a method therefore
// decides on a lagging replica exactly as on a replica that applied them,
// so it need not wait for them: the next update of a client writing in a
// loop does not wait for the previous one's commit to reach this node. Any other request, and any request
// after a non-neutral write, waits as before. A field added to the
// message later is not neutral until listed here.
var neutralUpdateFields = map[protoreflect.Name]bool{
	"meta": true, "agent_id": true, "state": true, "reason": true, "metadata": true,
	"environment": true, "capability_descriptor": true, "name": true, "description": true,
}

// neutralWrite reports whether msg, a command of type t, is neutral.
func neutralWrite(t concordv1.CommandType, msg proto.Message) bool {
	if t != concordv1.CommandType_COMMAND_TYPE_AGENT_UPDATE {
		return false
	}
	neutral := true
	msg.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		neutral = neutralUpdateFields[fd.Name()]
		return neutral
	})
	return neutral
}

// awaitFence waits until the local replica applied the fence (its strict
// part for a fenceTolerant method): usually at once (the commit reached
// this node while the answer travelled to the client and the next request
// back).
func (s *Service) awaitFence(ctx context.Context, tolerant bool) error {
	wait := s.cfg.WaitFence
	if wait == nil {
		wait = s.cfg.WaitApplied
	}
	if wait == nil {
		return nil
	}
	index := s.fence.target(tolerant)
	if index == 0 || (s.cfg.AppliedIndex != nil && s.cfg.AppliedIndex() >= index) {
		return nil
	}
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > fenceWaitLimit {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, fenceWaitLimit)
		defer cancel()
	}
	return wait(ctx, index)
}
