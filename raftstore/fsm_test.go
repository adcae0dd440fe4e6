package raftstore

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// newTestFSM builds an FSM over a kv and a list module.
func newTestFSM(t *testing.T) (*fsm, *kvModule, *listModule) {
	t.Helper()
	kv, list := newKV(), &listModule{}
	f, err := newFSM([]Module{kv, list}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("newFSM: %v", err)
	}
	return f, kv, list
}

func cmdLog(index uint64, data []byte) *raft.Log {
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}
}

// mustPanic runs f and returns the panic message, failing if none.
func mustPanic(t *testing.T, f func()) (msg string) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Fatal("expected a panic")
		}
		msg, _ = r.(string)
	}()
	f()
	return ""
}

func TestFSM_ApplyRoutesToModule(t *testing.T) {
	f, kv, list := newTestFSM(t)
	tests := []struct {
		name string
		data []byte
		want any
	}{
		{"kv put first", encode(cmdKVPut, put("a=1")), ""},
		{"kv put again returns previous", encode(cmdKVPut, put("a=2")), "1"},
		{"list add", encode(cmdLogAdd, put("x")), 1},
		{"list add second", encode(cmdLogAdd, put("y")), 2},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			idx := uint64(10 + i)
			resp := f.Apply(cmdLog(idx, tt.data))
			r, ok := resp.(*applyResult)
			if !ok {
				t.Fatalf("response %T, want *applyResult", resp)
			}
			if r.err != nil || r.value != tt.want {
				t.Fatalf("got (%v, %v), want (%v, nil)", r.value, r.err, tt.want)
			}
			if got := f.applied.Load(); got != idx {
				t.Fatalf("applied index %d, want %d", got, idx)
			}
		})
	}
	if v, _ := kv.get("a"); v != "2" {
		t.Fatalf("kv a = %q", v)
	}
	if got := strings.Join(list.list(), ","); got != "x,y" {
		t.Fatalf("list = %q", got)
	}
	if kv.lastIndex != 11 {
		t.Fatalf("kv handler saw index %d, want 11", kv.lastIndex)
	}
}

func TestFSM_DomainErrorIsAValue(t *testing.T) {
	f, kv, _ := newTestFSM(t)
	tests := []struct {
		name  string
		data  []byte
		check func(error) bool
	}{
		{"sentinel", encode(cmdKVDelete, put("missing")), func(err error) bool { return errors.Is(err, errKeyNotFound) }},
		{"typed", encode(cmdKVPut, put("no-equals-sign")), func(err error) bool {
			var ke *kvError
			return errors.As(err, &ke) && ke.Key == "no-equals-sign"
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.Apply(cmdLog(uint64(i+1), tt.data)).(*applyResult)
			if !tt.check(r.err) {
				t.Fatalf("unexpected error %v", r.err)
			}
		})
	}
	if len(kv.snapshotMap()) != 0 {
		t.Fatal("a rejected command changed state")
	}
	if f.applied.Load() != 2 {
		t.Fatal("a rejected command must still advance the applied index")
	}
}

func TestFSM_PanicsOnCorruptOrUnknown(t *testing.T) {
	f, _, _ := newTestFSM(t)
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"unknown type without ignorable bit", encode(concordv1.CommandType_COMMAND_TYPE_SCOPE_CREATE, put("x")), "unknown command type"},
		{"unassigned value", []byte{100}, "unknown command type"},
		{"type zero", []byte{0}, "unknown command type"},
		{"body does not decode", append([]byte{byte(cmdKVPut)}, 0xff, 0xff, 0xff), "corrupt"},
		{"noop body does not decode", []byte{255, 0x0a, 0x05, 'x'}, "corrupt"},
		{"empty entry", nil, "empty command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := mustPanic(t, func() { f.Apply(cmdLog(7, tt.data)) })
			if !strings.Contains(msg, tt.want) {
				t.Fatalf("panic %q, want it to mention %q", msg, tt.want)
			}
		})
	}
	if f.applied.Load() != 0 {
		t.Fatal("a panicking entry advanced the applied index")
	}
}

func TestFSM_SkipsIgnorableAndNoop(t *testing.T) {
	f, kv, _ := newTestFSM(t)
	tests := []struct {
		name string
		data []byte
	}{
		{"ignorable unknown type", encode(concordv1.CommandType(0x80|5), put("from the future"))},
		{"ignorable with garbage body", []byte{0xC1, 0xff, 0xff}},
		{"noop", encode(concordv1.CommandType_COMMAND_TYPE_NOOP, &concordv1.Noop{Note: "barrier"})},
		{"noop empty body", []byte{255}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			idx := uint64(i + 1)
			if resp := f.Apply(cmdLog(idx, tt.data)); resp != nil {
				t.Fatalf("response %v, want nil", resp)
			}
			if f.applied.Load() != idx {
				t.Fatal("a skipped entry must still advance the applied index")
			}
		})
	}
	if len(kv.indexes) != 0 {
		t.Fatal("module saw a skipped entry")
	}
}

func TestFSM_NonCommandEntries(t *testing.T) {
	f, _, _ := newTestFSM(t)
	if r := f.Apply(&raft.Log{Index: 3, Term: 2, Type: raft.LogConfiguration}); r != nil {
		t.Fatalf("configuration response %v", r)
	}
	if f.applied.Load() != 3 || f.appliedTerm.Load() != 2 {
		t.Fatal("configuration entry must advance the applied position")
	}
	if r := f.Apply(&raft.Log{Index: 4, Term: 2, Type: raft.LogNoop}); r != nil {
		t.Fatalf("noop response %v", r)
	}
}

func TestFSM_ApplyBatch(t *testing.T) {
	f, kv, _ := newTestFSM(t)
	logs := []*raft.Log{
		cmdLog(1, encode(cmdKVPut, put("a=1"))),
		{Index: 2, Term: 1, Type: raft.LogConfiguration},
		cmdLog(3, encode(cmdKVDelete, put("zz"))),
		cmdLog(4, encode(cmdKVPut, put("a=2"))),
	}
	out := f.ApplyBatch(logs)
	if len(out) != len(logs) {
		t.Fatalf("%d responses for %d logs", len(out), len(logs))
	}
	if out[0].(*applyResult).value != "" || out[1] != nil || !errors.Is(out[2].(*applyResult).err, errKeyNotFound) || out[3].(*applyResult).value != "1" {
		t.Fatalf("responses %v", out)
	}
	if v, _ := kv.get("a"); v != "2" || f.applied.Load() != 4 {
		t.Fatalf("a=%q applied=%d", v, f.applied.Load())
	}
}

func TestNewFSM_RejectsBadTables(t *testing.T) {
	str := func() proto.Message { return &wrapperspb.StringValue{} }
	ok := func(uint64, proto.Message) (any, error) { return nil, nil }
	tests := []struct {
		name    string
		modules []Module
		want    string
	}{
		{"duplicate type", []Module{newKV(), &tableModule{name: "other", h: map[concordv1.CommandType]Handler{cmdKVPut: {New: str, Apply: ok}}}}, "claimed by both"},
		{"duplicate name", []Module{newKV(), newKV()}, "duplicate module name"},
		{"noop claimed", []Module{&tableModule{name: "m", h: map[concordv1.CommandType]Handler{concordv1.CommandType_COMMAND_TYPE_NOOP: {New: str, Apply: ok}}}}, "reserved"},
		{"type zero", []Module{&tableModule{name: "m", h: map[concordv1.CommandType]Handler{0: {New: str, Apply: ok}}}}, "outside"},
		{"type too large", []Module{&tableModule{name: "m", h: map[concordv1.CommandType]Handler{300: {New: str, Apply: ok}}}}, "outside"},
		{"missing New", []Module{&tableModule{name: "m", h: map[concordv1.CommandType]Handler{5: {Apply: ok}}}}, "lacks"},
		{"empty name", []Module{&tableModule{}}, "empty name"},
		{"nil module", []Module{nil}, "nil module"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newFSM(tt.modules, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestFSM_CheckProposal(t *testing.T) {
	f, _, _ := newTestFSM(t)
	// An AGENT_REGISTER body under the NOOP byte: its agent is field 2,
	// unknown to Noop.
	smuggled := encode(concordv1.CommandType_COMMAND_TYPE_NOOP,
		&concordv1.AgentRegisterRequest{Agent: &concordv1.AgentRecord{Id: "rogue"}})
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"valid", encode(cmdKVPut, put("a=1")), nil},
		{"empty", nil, ErrInvalidCommand},
		{"type zero", []byte{0}, ErrInvalidCommand},
		{"unknown", []byte{byte(concordv1.CommandType_COMMAND_TYPE_SCOPE_CREATE)}, ErrUnknownCommand},
		{"ignorable unknown", []byte{0x90, 0xff}, ErrUnknownCommand},
		{"ignorable unknown type 200 with a valid body", encode(concordv1.CommandType(200), put("a=1")), ErrUnknownCommand},
		{"bad body", []byte{byte(cmdKVPut), 0xff}, ErrInvalidCommand},
		{"noop", []byte{255}, nil},
		{"noop with note", encode(concordv1.CommandType_COMMAND_TYPE_NOOP, &concordv1.Noop{Note: "barrier"}), nil},
		{"bad noop body", []byte{255, 0xff}, ErrInvalidCommand},
		{"another body under the noop byte", smuggled, ErrInvalidCommand},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := f.checkProposal(tt.data)
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, tt.want)
			}
		})
	}
}

func TestFSM_CheckMessage(t *testing.T) {
	f, _, _ := newTestFSM(t)
	tests := []struct {
		name string
		t    concordv1.CommandType
		msg  proto.Message
		want error
	}{
		{"valid", cmdKVPut, put("a=1"), nil},
		{"noop", concordv1.CommandType_COMMAND_TYPE_NOOP, &concordv1.Noop{}, nil},
		{"wrong message type", cmdKVPut, &concordv1.Noop{}, ErrInvalidCommand},
		{"nil message", cmdKVPut, nil, ErrInvalidCommand},
		{"unknown", concordv1.CommandType_COMMAND_TYPE_SCOPE_CREATE, put("x"), ErrUnknownCommand},
		{"out of range", 4096, put("x"), ErrInvalidCommand},
		{"ignorable unknown", 0x85, put("x"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := f.checkMessage(tt.t, tt.msg)
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, tt.want)
			}
		})
	}
}

// tableModule is a module with a fixed handler table and no state.
type tableModule struct {
	name string
	h    map[concordv1.CommandType]Handler
}

func (m *tableModule) Name() string                                { return m.name }
func (m *tableModule) Handlers() map[concordv1.CommandType]Handler { return m.h }
func (m *tableModule) Snapshot() (ModuleSnapshot, error)           { return &listSnapshot{}, nil }
func (m *tableModule) Restore(next func() ([]byte, error)) (func(), error) {
	for {
		if _, err := next(); errors.Is(err, io.EOF) {
			return nil, nil
		} else if err != nil {
			return nil, err
		}
	}
}
