package raftstore

import (
	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Module is one piece of replicated state that the FSM routes commands to
// (the agent registry and sessions from package node, consensus runs, ...).
// Modules are declared by their owners and handed to the Store through
// Config.Modules; raftstore knows nothing of what they hold.
//
// Concurrency: the FSM calls Handlers' Apply functions, Snapshot and Restore
// from raft's single FSM goroutine, never concurrently with each other.
// A module that is also read by other goroutines guards its own state.
type Module interface {
	// Name is the module's stable identifier, written into snapshots. It
	// must never change once data has been persisted under it.
	Name() string

	// Handlers returns the command types this module owns, each with its
	// decoder and apply function. It is called once, when the Store is
	// built; two modules claiming the same type is a configuration error.
	Handlers() map[concordv1.CommandType]Handler

	// Snapshot captures a point-in-time view quickly (a copy under a read
	// lock or an immutable structure). Encoding happens later, in
	// ModuleSnapshot.Persist, possibly while Apply continues.
	Snapshot() (ModuleSnapshot, error)

	// Restore decodes records written by ModuleSnapshot.Persist (in the
	// same order) into brand-new state. It must not touch live state: it
	// returns a commit function that the FSM calls to swap the new state
	// in, only after every module has decoded successfully.
	// next returns io.EOF after the module's last record. An err wrapping
	// ErrHalt halts the FSM, as from a Handler.
	Restore(next func() ([]byte, error)) (commit func(), err error)
}

// Handler decodes and applies one command type.
type Handler struct {
	// New returns an empty message of the command's body type.
	New func() proto.Message

	// Decode, optional, decodes an entry's body in place of New and
	// proto.Unmarshal: a module's faster decoder for a command every
	// replica applies often. It must accept, refuse and produce exactly
	// what proto.Unmarshal into New's message would.
	Decode func(body []byte) (proto.Message, error)

	// Apply applies the decoded body at the given Raft log index. It must
	// be deterministic: no clock, no randomness, no map-order dependence,
	// no I/O. A domain error (unknown agent, conflict, ...) is returned as
	// err and travels back to the proposer as a value; it must leave the
	// state unchanged. The result is returned to the proposer as is, or,
	// when it is a LazyResult, as its Value. An err wrapping ErrHalt
	// instead halts the FSM (this build cannot apply the log as the other
	// replicas do). The FSM does not read msg after Apply returns, so a
	// module may reuse a message its Decode made once Apply is done with it.
	Apply func(index uint64, msg proto.Message) (result any, err error)
}

// LazyResult is a result a Handler's Apply may return in place of the
// value, when building the value costs more than keeping what it is built
// from: every replica applies every command, but only the node that
// proposed one reads its result. Value is called each time the result is
// read (the proposer's Apply or forward), on the reader's goroutine, after
// Apply returned and possibly while later commands apply: it must read
// only data that no later Apply changes.
type LazyResult interface {
	Value() any
}

// ModuleSnapshot is a captured point-in-time view of a Module.
type ModuleSnapshot interface {
	// Persist encodes the view as a sequence of records, calling write
	// once per record. It may run concurrently with Apply. write keeps
	// nothing of record once it returns, so Persist may reuse the buffer.
	Persist(write func(record []byte) error) error

	// Release is called when the snapshot is no longer needed.
	Release()
}

// ResultCodec is implemented by a Module whose results may travel from the
// leader to a follower that forwarded the command. With it, the follower
// answers its caller with the leader's result as soon as the leader
// committed the command, instead of waiting until its own FSM applied it
// (see forward.go and DESIGN.md, "Returning results through the forward").
// Types the codec declines keep the wait-for-local-apply path.
type ResultCodec interface {
	// EncodeResult encodes what the module's handler returned for a
	// command of type t: the result value, or the domain error in r.Err.
	// ok false declines (this type or this value has no encoding); the
	// origin then waits for its own apply, as without a codec.
	EncodeResult(t concordv1.CommandType, r Result) (data []byte, ok bool)

	// DecodeResult is EncodeResult's inverse. data comes from another
	// process (possibly another binary version): anything malformed must
	// return an error, never panic. The origin then falls back to its own
	// apply.
	DecodeResult(t concordv1.CommandType, data []byte) (Result, error)
}

// Result is one command's outcome as a module's handler returned it: the
// value, or the domain error (the command is committed either way).
type Result struct {
	Value any
	Err   error
}
