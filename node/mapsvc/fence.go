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
//
// A request skips the writes that cannot change what it reads (its
// fenceLevel): a fenceTolerant method the neutral writes, and map/connect
// also the fresh sessions, until it reads sessions or agents
// (connectReadsRegistry).

// fenceWaitLimit bounds a request's wait for its fence. The fence is
// normally reached within one replication round; a replica that cannot
// reach it sooner has lost its leader (a partition) or lags far behind,
// and the caller is better served by a prompt retryable 4000 (and a
// reconnect elsewhere) than by an answer after its own timeout: a write
// through a cut-off follower fails within about this time too.
const fenceWaitLimit = 2 * time.Second

// writeClass sorts an answered write by the requests that may skip it.
type writeClass uint8

const (
	// writeOther: every request waits for it.
	writeOther writeClass = iota
	// writeNeutral (neutralWrite): fenceTolerant methods and map/connect
	// skip it.
	writeNeutral
	// writeFreshSession: a SESSION_OPEN of a new session that reclaims no
	// agent. It adds a session and changes nothing else, so only a
	// request that reads sessions waits for it; map/connect skips it until
	// it reads sessions (connectReadsRegistry). Under a burst of connects
	// through a follower, each connect waited here for the previous ones'
	// commit to reach this replica (a replication round) before its own
	// write could start.
	writeFreshSession
)

// fenceLevel is how much of the fence a request waits for.
type fenceLevel uint8

const (
	// fenceAll: every write this node answered.
	fenceAll fenceLevel = iota
	// fenceStrict: all but writeNeutral (fenceTolerant methods).
	fenceStrict
	// fenceConnect: writeOther only (map/connect before it reads sessions
	// or agents).
	fenceConnect
)

// fence is the node's read-your-writes index, one per fenceLevel: the
// highest index of the answered writes that level waits for.
type fence struct{ all, strict, connect atomic.Uint64 }

// raise records an answered write of class c at index.
func (f *fence) raise(index uint64, c writeClass) {
	raiseTo(&f.all, index)
	if c != writeNeutral {
		raiseTo(&f.strict, index)
	}
	if c == writeOther {
		raiseTo(&f.connect, index)
	}
}

// target is the index a request at level l must see applied first.
func (f *fence) target(l fenceLevel) uint64 {
	switch l {
	case fenceStrict:
		return f.strict.Load()
	case fenceConnect:
		return f.connect.Load()
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
//
// The origin session's epoch (origin_session_id, origin_session_epoch)
// is neutral too: it only decides whether the update applies at all.
var neutralUpdateFields = map[protoreflect.Name]bool{
	"meta": true, "agent_id": true, "state": true, "reason": true, "metadata": true,
	"environment": true, "capability_descriptor": true, "name": true, "description": true,
	"origin_session_id": true, "origin_session_epoch": true,
}

// classify returns the writeClass of msg, a command of type t.
func classify(t concordv1.CommandType, msg proto.Message) writeClass {
	if neutralWrite(t, msg) {
		return writeNeutral
	}
	if o, ok := msg.(*concordv1.SessionOpenRequest); ok && t == concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN &&
		!o.GetResume() && len(o.GetReclaimAgents()) == 0 {
		return writeFreshSession
	}
	return writeOther
}

// connectReadsRegistry reports whether a map/connect with these params
// reads sessions or agents before it writes: a resume (sessionId,
// resumeToken), a chosen participantId (is it held?) or agents to
// reclaim. Such a connect waits for the whole fence first; any other
// reads only the ACL state (authentication, capability ceilings), so
// fenceConnect suffices.
func connectReadsRegistry(cp *connectParams) bool {
	return cp.sessionID != "" || cp.resumeToken != "" || cp.participantID != "" || len(cp.reclaim) > 0
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

// awaitFence waits until the local replica applied the fence at level l:
// usually at once (the commit reached this node while the answer travelled
// to the client and the next request back).
func (s *Service) awaitFence(ctx context.Context, l fenceLevel) error {
	wait := s.cfg.WaitFence
	if wait == nil {
		wait = s.cfg.WaitApplied
	}
	if wait == nil {
		return nil
	}
	index := s.fence.target(l)
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
