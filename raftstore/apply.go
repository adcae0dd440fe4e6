package raftstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Apply proposes one command (type byte + marshalled msg) and waits until it
// is committed and applied on this node, the leader. It returns the
// module's result and the raft index the command was committed at.
//
// Errors:
//   - the module's domain error comes back as a *CommandError (the command
//     IS committed at the returned index); errors.Is/As reach the module's
//     own error through it. raft returns such errors through
//     ApplyFuture.Response, not Error, and Apply unwraps them from there;
//   - *NotLeaderError (errors.Is ErrNotLeader) or ErrNoLeader: nothing was
//     proposed; forward to the leader or retry;
//   - ErrLeadershipLost, or ErrTimeout after the command was enqueued: the
//     outcome is unknown (the command may still commit);
//   - ErrShutdown, ErrUnknownCommand, ErrInvalidCommand.
//
// On a follower, Apply forwards through Config.Forwarder when one is set
// (see forward.go) and otherwise returns *NotLeaderError / ErrNoLeader.
// A forwarded command whose module has a ResultCodec returns the leader's
// result once the leader committed it, possibly before this replica
// applied it: call WaitApplied(index) before reading its effect here.
// Without a codec, Apply returns after this replica applied the index.
// With a Forwarder, a leader that loses leadership before raft takes the
// command (raft's ErrNotLeader, or a leadership transfer in progress)
// forwards it too, within the same bound, instead of failing: nothing was
// appended, so it cannot apply twice. ErrLeadershipLost is never retried.
//
// The wait is bounded by ctx, or by Config.ApplyTimeout when ctx has no
// deadline. Concurrent Apply calls are group-committed by raft (one log
// write for many commands) but each gets its own entry, index and result.
//
// While this server's disk is full (see DiskFull), the error matches
// ErrDiskFull as well as the one above it.
func (s *Store) Apply(ctx context.Context, t concordv1.CommandType, msg proto.Message) (any, uint64, error) {
	res, index, err := s.apply(ctx, t, msg)
	return res, index, s.blameDisk(err)
}

func (s *Store) apply(ctx context.Context, t concordv1.CommandType, msg proto.Message) (any, uint64, error) {
	if err := s.fsm.checkMessage(t, msg); err != nil {
		return nil, 0, err
	}
	buf := make([]byte, 1, 1+proto.Size(msg))
	buf[0] = byte(t)
	buf, err := proto.MarshalOptions{}.MarshalAppend(buf, msg)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: marshal %s: %w", ErrInvalidCommand, t, err)
	}
	if s.cfg.Forwarder == nil {
		return s.propose(ctx, t, buf)
	}
	// One bound for both attempts: a propose that bounces and the forward
	// after it share the caller's deadline (or ApplyTimeout).
	deadline := s.applyDeadline(ctx)
	if s.raft.State() == raft.Leader {
		res, index, err := s.proposeUntil(ctx, deadline, t, buf)
		if !notProposed(err) {
			return res, index, err
		}
		// Leadership moved between the check above and raft's leader
		// loop taking the command: raft answered ErrNotLeader (or a
		// transfer is under way), so nothing was appended and sending it
		// to the new leader cannot apply it twice. ErrLeadershipLost is
		// not in this set: the command may still commit, and the caller
		// gets the outcome-unknown error unchanged.
		s.log.Debug("leadership moved before the command was appended; forwarding", "err", err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	return s.forward(ctx, t, buf)
}

// notProposed reports an error from propose that guarantees the command
// never reached the log: this server was not (or stopped being) the
// leader before raft accepted it.
func notProposed(err error) bool {
	return errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader)
}

// ApplyRaw is Apply for a command already encoded as type byte + body, as
// forwarded by a follower. Because the bytes come from another process, the
// body is fully decoded first: a command that would make replicas panic, or
// whose type this binary does not know (ignorable bit or not), is refused
// with ErrUnknownCommand or ErrInvalidCommand instead. Results and
// errors are as for Apply, except that ApplyRaw never forwards: on a
// follower it returns *NotLeaderError or ErrNoLeader, so a forwarded
// command reaching a deposed leader bounces back to its origin instead of
// hopping on. data is not retained after ApplyRaw returns
// except inside the raft log. Once the command is committed, ApplyRaw
// has the followers learn the new commit index at once (nudge.go).
func (s *Store) ApplyRaw(ctx context.Context, data []byte) (any, uint64, error) {
	return s.applyRaw(ctx, data, nudgeNow)
}

// nudging is how a committed forwarded command has the followers learn
// the new commit index (nudge.go).
type nudging int

const (
	nudgeNow  nudging = iota // the origin waits for its own apply
	nudgeLazy                // the origin has its answer; only soon
	nudgeNone                // nobody waits for this commit (a fence's NOOP)
)

// applyRaw is ApplyRaw with the nudge n.
func (s *Store) applyRaw(ctx context.Context, data []byte, n nudging) (any, uint64, error) {
	if err := s.fsm.checkProposal(data); err != nil {
		return nil, 0, err
	}
	res, index, err := s.propose(ctx, concordv1.CommandType(data[0]), data)
	if index != 0 && n != nudgeNone {
		// Committed (also with a module's error): the followers must
		// learn the new commit index before raft's next CommitTimeout
		// (nudge.go).
		s.kickNudge(n == nudgeNow)
	}
	return res, index, s.blameDisk(err)
}

// propose submits data to raft and maps the outcome.
func (s *Store) propose(ctx context.Context, t concordv1.CommandType, data []byte) (any, uint64, error) {
	return s.proposeUntil(ctx, s.applyDeadline(ctx), t, data)
}

// proposeUntil is propose bounded by deadline, ctx's own or one
// applyDeadline chose. It derives no context from ctx: on the write path
// ctx is a MAP connection's, without a deadline, and a timer context per
// write cost about ten allocations (issue 10); awaitUntil keeps the bound
// with a pooled timer instead.
func (s *Store) proposeUntil(ctx context.Context, deadline time.Time, t concordv1.CommandType, data []byte) (any, uint64, error) {
	if err := s.enter(); err != nil {
		return nil, 0, err
	}
	defer s.leave()
	if s.raft.State() != raft.Leader {
		return nil, 0, s.notLeader()
	}
	if h := s.testHookBeforeApply; h != nil {
		h()
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, ctxErr(ctx)
	}
	timeout := time.Until(deadline)
	if timeout <= 0 {
		return nil, 0, errDeadline
	}
	f := s.raft.Apply(data, timeout)
	if err := s.awaitUntil(ctx, deadline, f); err != nil {
		return nil, 0, err
	}
	index := f.Index()
	switch r := f.Response().(type) {
	case *applyResult:
		if r.err != nil {
			return r.result(), index, &CommandError{Type: t, Index: index, Err: r.err}
		}
		return r.result(), index, nil
	case nil:
		return nil, index, nil // NOOP or an ignorable type this node skips
	default:
		return nil, index, fmt.Errorf("raftstore: unexpected FSM response %T", r)
	}
}

// applyDeadline is when an Apply gives up: ctx's deadline, or
// Config.ApplyTimeout from now when ctx has none.
func (s *Store) applyDeadline(ctx context.Context) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(s.cfg.ApplyTimeout)
}

// errDeadline is what a wait bounded by applyDeadline returns when the
// bound passes: the error ctxErr gives for a context whose deadline passed.
var errDeadline = fmt.Errorf("%w: %w", ErrTimeout, context.DeadlineExceeded)

// withDefaultTimeout bounds ctx by Config.ApplyTimeout when it has no
// deadline of its own.
func (s *Store) withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.cfg.ApplyTimeout)
}

// enqueueTimeout derives the timeout raft's API takes from ctx's deadline.
func enqueueTimeout(ctx context.Context) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, ctxErr(ctx)
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return 0, nil
	}
	d := time.Until(dl)
	if d <= 0 {
		return 0, errDeadline
	}
	return d, nil
}

// await waits for a raft future, for ctx, or for raft to shut down, and
// returns the future's error translated. Must be called between enter and
// leave.
func (s *Store) await(ctx context.Context, f raft.Future) error {
	return s.awaitUntil(ctx, time.Time{}, f)
}

// awaitUntil is await that also gives up at deadline (zero: no deadline
// but ctx's), with errDeadline. raft futures only offer a blocking Error,
// so a goroutine (owned by the Store, counted in futures) does the
// blocking; it ends when raft resolves the future, which raft does for
// every future while it runs (Shutdown drains before stopping raft). Its
// channel is pooled when it delivered; a caller that gives up leaves it to
// the goroutine.
func (s *Store) awaitUntil(ctx context.Context, deadline time.Time, f raft.Future) error {
	var expired <-chan time.Time
	if _, ok := ctx.Deadline(); !ok && !deadline.IsZero() {
		t := getTimer(time.Until(deadline))
		defer putTimer(t)
		expired = t.C
	}
	done := getDoneChan()
	s.futures.Add(1)
	go func() {
		defer s.futures.Done()
		done <- f.Error()
	}()
	select {
	case err := <-done:
		doneChans.Put(done)
		return s.translate(err)
	case <-ctx.Done():
		return ctxErr(ctx)
	case <-expired:
		return errDeadline
	case <-s.raftDown:
		return ErrShutdown
	}
}

// awaitWithCtx runs op (which calls a raft method taking a timeout) with
// the timeout derived from ctx and waits for its future.
func (s *Store) awaitWithCtx(ctx context.Context, op func(timeout time.Duration) raft.Future) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	ctx, cancel := s.withDefaultTimeout(ctx)
	defer cancel()
	timeout, err := enqueueTimeout(ctx)
	if err != nil {
		return err
	}
	return s.await(ctx, op(timeout))
}
