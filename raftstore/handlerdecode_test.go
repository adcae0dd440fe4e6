package raftstore

import (
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// decodeModule has a Handler with its own Decode and a LazyResult: the
// result is the decoded text upper-cased, built when read.
type decodeModule struct {
	decodes atomic.Int64 // Decode calls
	values  atomic.Int64 // LazyResult.Value calls
}

type upperResult struct {
	m *decodeModule
	s string
}

func (r upperResult) Value() any {
	r.m.values.Add(1)
	return strings.ToUpper(r.s)
}

func (m *decodeModule) Name() string { return "decoding" }

func (m *decodeModule) Handlers() map[concordv1.CommandType]Handler {
	return map[concordv1.CommandType]Handler{
		cmdKVPut: {
			New: func() proto.Message { return &wrapperspb.StringValue{} },
			Decode: func(body []byte) (proto.Message, error) {
				m.decodes.Add(1)
				v := &wrapperspb.StringValue{}
				if err := proto.Unmarshal(body, v); err != nil {
					return nil, err
				}
				if v.GetValue() == "undecodable" {
					return nil, errors.New("decoding: undecodable")
				}
				return v, nil
			},
			Apply: func(_ uint64, msg proto.Message) (any, error) {
				return upperResult{m: m, s: msg.(*wrapperspb.StringValue).GetValue()}, nil
			},
		},
	}
}

func (m *decodeModule) Snapshot() (ModuleSnapshot, error) { return &kvSnapshot{}, nil }

func (m *decodeModule) Restore(next func() ([]byte, error)) (func(), error) {
	return func() {}, nil
}

// TestHandler_DecodeAndLazyResult: the FSM decodes with a handler's
// Decode, treats its error as a corrupt body, and the proposer gets a
// LazyResult's Value.
func TestHandler_DecodeAndLazyResult(t *testing.T) {
	m := &decodeModule{}
	s := NewTestStore(t, m)
	res, _, err := s.Apply(testCtx(t), cmdKVPut, put("abc"))
	if err != nil || res != "ABC" {
		t.Fatalf("Apply = %v, %v; want ABC", res, err)
	}
	if m.decodes.Load() != 1 || m.values.Load() != 1 {
		t.Fatalf("%d decodes and %d values, want 1 and 1", m.decodes.Load(), m.values.Load())
	}

	f, err := newFSM([]Module{&decodeModule{}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	r := f.Apply(cmdLog(1, encode(cmdKVPut, put("x")))).(*applyResult)
	if _, lazy := r.value.(LazyResult); !lazy || r.result() != "X" {
		t.Fatalf("kept %T, read %v; want the LazyResult, read as X", r.value, r.result())
	}
	msg := mustPanic(t, func() { f.Apply(cmdLog(2, encode(cmdKVPut, put("undecodable")))) })
	if !strings.Contains(msg, "corrupt") {
		t.Fatalf("panic %q, want a corrupt body", msg)
	}
}
