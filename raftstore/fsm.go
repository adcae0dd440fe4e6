package raftstore

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// ignorableBit marks a command type an older binary may skip (STYLE.md §2).
const ignorableBit = 0x80

// route is one entry of the FSM's dispatch table.
type route struct {
	module  string
	handler Handler
	// msgName is the full name of the handler's body message, used to
	// refuse a proposal whose message does not match its command type.
	msgName protoreflect.FullName
}

// fsm is the raft.FSM: it routes each command entry to the module handler
// registered for its type byte. raft calls Apply, ApplyBatch, Snapshot and
// Restore from its single FSM goroutine; the applied position and the
// waiters are also read by other goroutines.
type fsm struct {
	log     *slog.Logger
	modules []Module          // immutable after newFSM; snapshot order
	byName  map[string]Module // immutable after newFSM
	routes  map[concordv1.CommandType]route
	// codecs maps a command type to its module's ResultCodec, for the
	// modules that implement one (immutable after newFSM).
	codecs map[concordv1.CommandType]ResultCodec

	progress         // applied position, waiters, kept results (progress.go)
	logCap   *logCap // nil: no cap on the log's length (logcap.go)
	// observe, when set, receives each handled command's apply time
	// (Config.ObserveApply).
	observe func(concordv1.CommandType, time.Duration)
	// halt is set when a module cannot go on (ErrHalt, halt.go).
	halt halt
	// epoch is when the FSM was made. The apply time is the difference of
	// two time.Since(epoch), which read only the monotonic clock: half of
	// time.Now's cost (wall and monotonic), paid twice per command.
	epoch time.Time
}

var (
	_ raft.FSM         = (*fsm)(nil)
	_ raft.BatchingFSM = (*fsm)(nil)
)

// applyResult is what Apply returns to raft for a routed command; raft hands
// it back to the proposer through ApplyFuture.Response.
type applyResult struct {
	value any
	err   error
}

// result is the handler's result value, built now if it returned a
// LazyResult.
func (r *applyResult) result() any {
	if l, ok := r.value.(LazyResult); ok {
		return l.Value()
	}
	return r.value
}

// newFSM builds the dispatch table. The table is explicit (no init-time
// registration) so a duplicate claim is a constructor error, not a silent
// override.
func newFSM(modules []Module, log *slog.Logger) (*fsm, error) {
	f := &fsm{
		log:     log,
		modules: append([]Module(nil), modules...),
		byName:  make(map[string]Module, len(modules)),
		routes:  make(map[concordv1.CommandType]route),
		codecs:  make(map[concordv1.CommandType]ResultCodec),
		epoch:   time.Now(),
	}
	f.progress.init()
	f.halt.init()
	for _, m := range modules {
		if m == nil {
			return nil, errors.New("raftstore: nil module")
		}
		name := m.Name()
		if name == "" {
			return nil, errors.New("raftstore: module with empty name")
		}
		if _, dup := f.byName[name]; dup {
			return nil, fmt.Errorf("raftstore: duplicate module name %q", name)
		}
		f.byName[name] = m
		codec, _ := m.(ResultCodec)
		for t, h := range m.Handlers() {
			if err := f.addRoute(name, t, h); err != nil {
				return nil, err
			}
			if codec != nil {
				f.codecs[t] = codec
			}
		}
	}
	return f, nil
}

func (f *fsm) addRoute(module string, t concordv1.CommandType, h Handler) error {
	switch {
	case t <= 0 || t > 255:
		return fmt.Errorf("raftstore: module %q: command type %d outside 1..255", module, t)
	case t == concordv1.CommandType_COMMAND_TYPE_NOOP:
		return fmt.Errorf("raftstore: module %q: %s is reserved for raftstore", module, t)
	case h.New == nil || h.Apply == nil:
		return fmt.Errorf("raftstore: module %q: handler for %s lacks New or Apply", module, t)
	}
	if prev, dup := f.routes[t]; dup {
		return fmt.Errorf("raftstore: command type %s claimed by both %q and %q", t, prev.module, module)
	}
	f.routes[t] = route{module: module, handler: h, msgName: h.New().ProtoReflect().Descriptor().FullName()}
	return nil
}

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) any {
	if err := f.halt.cause(); err != nil {
		return &applyResult{err: err}
	}
	switch l.Type {
	case raft.LogCommand:
		resp := f.applyCommand(l)
		if f.halt.cause() != nil {
			return resp // not applied: the index stays before it
		}
		f.advance(l.Index, l.Term, resp, true)
		f.logCap.applied(l.Index)
		return resp
	case raft.LogConfiguration:
		// Nothing to do; tracked only so the applied index keeps up.
		f.advance(l.Index, l.Term, nil, false)
		f.logCap.applied(l.Index)
	}
	return nil
}

// ApplyBatch implements raft.BatchingFSM: one call per group of committed
// entries saves raft a channel round trip and a metrics sample per entry.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	for i, l := range logs {
		out[i] = f.Apply(l)
	}
	return out
}

// applyCommand decodes and dispatches one command entry. It panics on a
// corrupt entry or an unknown non-ignorable type: carrying on would make
// this replica's state diverge from the others' (STYLE.md §2).
func (f *fsm) applyCommand(l *raft.Log) any {
	if len(l.Data) == 0 {
		panic(fmt.Sprintf("raftstore: empty command at index %d", l.Index))
	}
	t := concordv1.CommandType(l.Data[0])
	if t == concordv1.CommandType_COMMAND_TYPE_NOOP {
		if err := proto.Unmarshal(l.Data[1:], &concordv1.Noop{}); err != nil {
			panic(fmt.Sprintf("raftstore: corrupt %s body at index %d: %v", t, l.Index, err))
		}
		return nil
	}
	r, ok := f.routes[t]
	if !ok {
		if l.Data[0]&ignorableBit != 0 {
			f.log.Debug("skipped ignorable command", "index", l.Index, "command_type", int(l.Data[0]))
			return nil
		}
		panic(fmt.Sprintf("raftstore: unknown command type %d at index %d", l.Data[0], l.Index))
	}
	msg, err := r.decode(l.Data[1:])
	if err != nil {
		panic(fmt.Sprintf("raftstore: corrupt %s body at index %d: %v", t, l.Index, err))
	}
	if f.observe == nil {
		v, err := r.handler.Apply(l.Index, msg)
		return f.result(l, v, err)
	}
	start := time.Since(f.epoch)
	v, err := r.handler.Apply(l.Index, msg)
	f.observe(t, time.Since(f.epoch)-start)
	return f.result(l, v, err)
}

// result wraps a handler's outcome, halting the FSM on ErrHalt.
func (f *fsm) result(l *raft.Log, v any, err error) *applyResult {
	if err != nil && errors.Is(err, ErrHalt) {
		f.log.Error("FSM halted: this build cannot apply the log; stop the node and run a build that can", "index", l.Index, "err", err)
		f.halt.set(err)
	}
	return &applyResult{value: v, err: err}
}

// decode decodes a body of the route's command type: with the handler's
// Decode when it has one.
func (r *route) decode(body []byte) (proto.Message, error) {
	if r.handler.Decode != nil {
		return r.handler.Decode(body)
	}
	msg := r.handler.New()
	if err := proto.Unmarshal(body, msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// checkProposal refuses, before it reaches the log, a command forwarded by
// another process that this leader cannot vouch for: it would make every
// replica panic, or it is not a command this binary knows at all. The body
// is fully decoded. Unlike a local typed proposal, an unknown type is
// refused even with the ignorable bit: the bit lets an older replica skip
// an entry a newer leader wrote, not let a caller put bytes nobody can
// read into the log. NOOP, raftstore's own type, must not carry unknown
// fields (another command's body smuggled under the NOOP byte).
func (f *fsm) checkProposal(data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: empty", ErrInvalidCommand)
	}
	t := concordv1.CommandType(data[0])
	var msg proto.Message
	switch r, ok := f.routes[t]; {
	case data[0] == 0:
		return fmt.Errorf("%w: command type 0", ErrInvalidCommand)
	case t == concordv1.CommandType_COMMAND_TYPE_NOOP:
		msg = &concordv1.Noop{}
	case ok:
		msg = r.handler.New()
	default:
		return fmt.Errorf("%w: %d", ErrUnknownCommand, data[0])
	}
	if err := proto.Unmarshal(data[1:], msg); err != nil {
		return fmt.Errorf("%w: %s body: %w", ErrInvalidCommand, t, err)
	}
	if t == concordv1.CommandType_COMMAND_TYPE_NOOP && len(msg.ProtoReflect().GetUnknown()) > 0 {
		return fmt.Errorf("%w: %s body carries unknown fields", ErrInvalidCommand, t)
	}
	return nil
}

// checkMessage refuses a typed proposal whose message is not the body type
// registered for t.
func (f *fsm) checkMessage(t concordv1.CommandType, msg proto.Message) error {
	if msg == nil {
		return fmt.Errorf("%w: nil message", ErrInvalidCommand)
	}
	var want protoreflect.FullName
	switch r, ok := f.routes[t]; {
	case t == concordv1.CommandType_COMMAND_TYPE_NOOP:
		want = (&concordv1.Noop{}).ProtoReflect().Descriptor().FullName()
	case ok:
		want = r.msgName
	case t <= 0 || t > 255:
		return fmt.Errorf("%w: command type %d outside 1..255", ErrInvalidCommand, t)
	case t&ignorableBit != 0:
		return nil
	default:
		return fmt.Errorf("%w: %s", ErrUnknownCommand, t)
	}
	if got := msg.ProtoReflect().Descriptor().FullName(); got != want {
		return fmt.Errorf("%w: %s carries %s, want %s", ErrInvalidCommand, t, got, want)
	}
	return nil
}
