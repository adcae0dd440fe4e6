package raftstore

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// cmdHaltIf is haltModule's command: its body "halt" halts the FSM.
const cmdHaltIf = concordv1.CommandType_COMMAND_TYPE_SCOPE_CREATE

// haltModule halts on a "halt" command, as a build below the system's FSM
// level does on its record.
type haltModule struct{ applied []string }

func (*haltModule) Name() string { return "halt" }

func (h *haltModule) Handlers() map[concordv1.CommandType]Handler {
	return map[concordv1.CommandType]Handler{cmdHaltIf: {
		New: func() proto.Message { return &wrapperspb.StringValue{} },
		Apply: func(_ uint64, msg proto.Message) (any, error) {
			v := msg.(*wrapperspb.StringValue).GetValue()
			if v == "halt" {
				return nil, fmt.Errorf("level too high: %w", ErrHalt)
			}
			h.applied = append(h.applied, v)
			return nil, nil
		},
	}}
}

func (*haltModule) Snapshot() (ModuleSnapshot, error) { return nil, errors.New("not used") }

func (*haltModule) Restore(func() ([]byte, error)) (func(), error) {
	return nil, errors.New("not used")
}

// A handler's ErrHalt stops the FSM: that entry and every later one are
// not applied (the applied index stays before it), no snapshot is taken,
// and the halt channel closes with the cause.
func TestFSM_HaltStopsApplying(t *testing.T) {
	kv, hm := newKV(), &haltModule{}
	f, err := newFSM([]Module{kv, hm}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	f.Apply(cmdLog(1, encode(cmdHaltIf, put("before"))))
	r := f.Apply(cmdLog(2, encode(cmdHaltIf, put("halt")))).(*applyResult)
	if !errors.Is(r.err, ErrHalt) {
		t.Fatalf("halting entry: %v, want ErrHalt", r.err)
	}
	select {
	case <-f.halt.ch:
	default:
		t.Fatal("halt channel not closed")
	}
	r = f.Apply(cmdLog(3, encode(cmdKVPut, put("a=1")))).(*applyResult)
	if !errors.Is(r.err, ErrHalt) {
		t.Fatalf("entry after the halt: %v, want ErrHalt", r.err)
	}
	if _, ok := kv.get("a"); ok || len(hm.applied) != 1 {
		t.Fatalf("entries applied after the halt: kv a present %v, halt module %v", ok, hm.applied)
	}
	if got := f.applied.Load(); got != 1 {
		t.Fatalf("applied index %d after the halt, want 1 (before the halting entry)", got)
	}
	if _, err := f.Snapshot(); !errors.Is(err, ErrHalt) {
		t.Fatalf("snapshot of a halted FSM: %v, want ErrHalt", err)
	}
}
