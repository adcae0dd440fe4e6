package registry

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// The hand decoders must be invisible: for any bytes, the FSM's decode
// (hand decoder, else proto.Unmarshal) fails exactly when proto.Unmarshal
// fails and otherwise yields the message proto.Unmarshal yields, presence
// of empty optional fields and unknown fields included.

// agentUpdateBodies are encoded AgentUpdateRequests the hand decoder must
// take (fast) and bodies it must give to proto.Unmarshal, or that
// proto.Unmarshal refuses.
func agentUpdateBodies(t testing.TB) (fast, other [][]byte) {
	enc := func(m *concordv1.AgentUpdateRequest) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	meta := &concordv1.CommandMeta{TimestampMs: 1_700_000_000_123, EventIds: []string{"01HZX3J5V6Q7R8S9T0V1W2X3Y4"},
		NodeId: "node-1", Source: "participant-7"}
	full := &concordv1.AgentUpdateRequest{
		Meta:    &concordv1.CommandMeta{TimestampMs: -5, EventIds: []string{"a", "", "c"}, NodeId: "n", Source: "s"},
		AgentId: "agent-ü", Transition: "suspend", State: proto.String("busy"), Reason: "why <&>",
		Metadata: []byte(`{"a":1}`), Environment: []byte{}, PermissionOverrides: []byte(`{}`), Capabilities: []byte(`[1]`),
		CapabilityDescriptor: []byte(`{"x":"y"}`), Name: proto.String(""), Description: proto.String("d"), Role: proto.String("r"),
		Visibility: proto.String("public"), SetOwner: true, OwnerId: "o", SessionId: "sid", HomeNode: "node-2",
		OriginSessionId: "origin-ü", OriginSessionEpoch: 1 << 40,
	}
	fast = [][]byte{
		{}, // an empty body: every field unset
		enc(&concordv1.AgentUpdateRequest{Meta: meta, AgentId: "agent-0001", State: proto.String("idle")}),
		enc(&concordv1.AgentUpdateRequest{Meta: meta, AgentId: "agent-0001", State: proto.String("")}),
		enc(&concordv1.AgentUpdateRequest{Meta: meta, AgentId: "a", State: proto.String("orphaned"), Reason: "r"}),
		enc(&concordv1.AgentUpdateRequest{Meta: &concordv1.CommandMeta{}, AgentId: "a"}),
		enc(&concordv1.AgentUpdateRequest{Meta: &concordv1.CommandMeta{EventIds: []string{"x", "y", "z", "w"}}}),
		enc(&concordv1.AgentUpdateRequest{Metadata: []byte{}, Capabilities: []byte{}}),
		// As mapsvc proposes it once every server enforces FSMLevelSessionWrites.
		enc(&concordv1.AgentUpdateRequest{Meta: meta, AgentId: "agent-0001", State: proto.String("busy"),
			OriginSessionId: "01HZX3J5V6Q7R8S9T0V1W2X3Y5", OriginSessionEpoch: 3}),
		enc(&concordv1.AgentUpdateRequest{OriginSessionId: "", OriginSessionEpoch: 1 << 63}),
		cat(field(fUpdOriginSessionID, "")), // an empty string written out
		enc(full),
		// The same fields in another order, an explicit zero set_owner, a
		// non-minimal varint: proto.Unmarshal takes them, so must we.
		cat(field(fUpdAgentID, "a"), protowire.AppendTag(nil, fUpdSetOwner, protowire.VarintType), []byte{0x80, 0x00},
			field(fUpdMeta, string(cat(field(fMetaSource, "s"), field(fMetaEventIDs, "1"), field(fMetaEventIDs, "2"))))),
		// Any varint but 0 is true.
		cat(protowire.AppendTag(nil, fUpdSetOwner, protowire.VarintType), []byte{0x82, 0x01}),
	}
	other = [][]byte{
		{0x0a},                          // truncated tag/length
		{0x0a, 0x05, 0x08},              // meta longer than the body
		{0x00},                          // field number 0
		cat(field(fUpdAgentID, "\xff")), // invalid UTF-8: refused
		cat(field(fUpdMeta, string(field(fMetaNodeID, "\xc3")))),
		cat(field(fUpdAgentID, "a"), field(fUpdAgentID, "b")),                                                   // repeated singular: the last wins
		cat(field(fUpdMeta, string(field(fMetaNodeID, "a"))), field(fUpdMeta, string(field(fMetaSource, "b")))), // merged
		cat(field(fUpdState, "busy"), field(fUpdState, "idle")),
		cat(field(99, "unknown")),                                                                                       // unknown field: kept as such
		cat(field(fUpdMeta, string(field(9, "unknown")))),                                                               // unknown in meta
		cat(protowire.AppendTag(nil, fUpdAgentID, protowire.VarintType), []byte{1}),                                     // wrong wire type
		cat(protowire.AppendTag(nil, fUpdSetOwner, protowire.BytesType), []byte{0}),                                     // wrong wire type
		cat(protowire.AppendTag(nil, fUpdMeta, protowire.StartGroupType)),                                               // group
		cat(field(fUpdMeta, string(cat(protowire.AppendTag(nil, fMetaTimestamp, protowire.VarintType), []byte{0x80})))), // truncated varint
		cat(field(fUpdMeta, string(cat(protowire.AppendTag(nil, fMetaTimestamp, protowire.VarintType), []byte{1},
			protowire.AppendTag(nil, fMetaTimestamp, protowire.VarintType), []byte{2})))), // repeated timestamp
		cat(protowire.AppendTag(nil, fUpdSetOwner, protowire.VarintType), []byte{1}, protowire.AppendTag(nil, fUpdSetOwner, protowire.VarintType), []byte{0}),
		cat(protowire.AppendTag(nil, fUpdOriginSessionEpoch, protowire.VarintType), []byte{1},
			protowire.AppendTag(nil, fUpdOriginSessionEpoch, protowire.VarintType), []byte{2}), // repeated epoch: the last wins
		cat(protowire.AppendTag(nil, fUpdOriginSessionEpoch, protowire.BytesType), []byte{0}),     // wrong wire type
		cat(protowire.AppendTag(nil, fUpdOriginSessionEpoch, protowire.VarintType), []byte{0x80}), // truncated varint
		cat(field(fUpdOriginSessionID, "\xff")),                                                   // invalid UTF-8
		cat(field(fUpdOriginSessionEpoch+1, "next")),                                              // the first field number after the known ones
		append(enc(full), 0x08), // trailing garbage
	}
	return fast, other
}

func field(num protowire.Number, v string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), v)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// sameAsUnmarshal checks the FSM's decode of body against proto.Unmarshal.
func sameAsUnmarshal(t testing.TB, decode func([]byte) (proto.Message, error), newMsg func() proto.Message, body []byte) {
	t.Helper()
	want := newMsg()
	werr := proto.Unmarshal(body, want)
	got, gerr := decode(body)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("body %x: decode error %v, proto.Unmarshal error %v", body, gerr, werr)
	}
	if werr != nil {
		return
	}
	if !proto.Equal(got, want) {
		t.Fatalf("body %x: decoded %v, proto.Unmarshal %v", body, got, want)
	}
	// proto.Equal compares set fields; the encodings also compare the
	// presence of empty optional fields and unknown fields byte for byte.
	opts := proto.MarshalOptions{Deterministic: true}
	gb, err1 := opts.Marshal(got)
	wb, err2 := opts.Marshal(want)
	if err1 != nil || err2 != nil || !bytes.Equal(gb, wb) {
		t.Fatalf("body %x: re-encoded %x (%v), proto.Unmarshal's %x (%v)", body, gb, err1, wb, err2)
	}
	if g, w := got.ProtoReflect().GetUnknown(), want.ProtoReflect().GetUnknown(); !bytes.Equal(g, w) {
		t.Fatalf("body %x: unknown fields %x, proto.Unmarshal's %x", body, g, w)
	}
	// And what Go code sees: nil against empty slices, nil pointers.
	if path, ok := sameGo(reflect.ValueOf(got), reflect.ValueOf(want), ""); !ok {
		t.Fatalf("body %x: decoded %v differs from proto.Unmarshal's at %s", body, got, path)
	}
}

// sameGo compares the exported fields of two generated messages as Go
// values: proto.Equal takes an empty bytes field for an unset one, Go code
// that tests for nil does not.
func sameGo(a, b reflect.Value, path string) (string, bool) {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return path, a.IsNil() == b.IsNil()
		}
		return sameGo(a.Elem(), b.Elem(), path)
	case reflect.Struct:
		for i := range a.NumField() {
			if f := a.Type().Field(i); f.IsExported() {
				if p, ok := sameGo(a.Field(i), b.Field(i), path+"."+f.Name); !ok {
					return p, false
				}
			}
		}
		return path, true
	case reflect.Slice:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return path, false
		}
		for i := range a.Len() {
			if p, ok := sameGo(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i)); !ok {
				return p, false
			}
		}
		return path, true
	default:
		return path, a.Equal(b)
	}
}

func newAgentUpdate() proto.Message { return new(concordv1.AgentUpdateRequest) }

// decodedTypes are the command types with a hand decoder, each with the
// constructor proto.Unmarshal decodes into.
var decodedTypes = []struct {
	typ    T
	newMsg func() proto.Message
}{
	{cAgentUpdate, newAgentUpdate},
	{cAgentRegister, func() proto.Message { return new(concordv1.AgentRegisterRequest) }},
	{cSessionOpen, func() proto.Message { return new(concordv1.SessionOpenRequest) }},
	{cSessionDetach, func() proto.Message { return new(concordv1.SessionDetachRequest) }},
	{cSessionExpire, func() proto.Message { return new(concordv1.SessionExpireRequest) }},
	{cSubCursor, func() proto.Message { return new(concordv1.SubscriptionCursorRequest) }},
}

// tableBodies are bodies of the table-decoded types: fast ones (the hand
// decoder must take them) and others (it must decline them).
func tableBodies(t testing.TB) (fast, other map[T][][]byte) {
	enc := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	meta := &concordv1.CommandMeta{TimestampMs: 1_700_000_000_123, EventIds: []string{"01HZX3J5V6Q7R8S9T0V1W2X3Y4", "x"},
		NodeId: "node-1", Source: "participant-7"}
	agent := &concordv1.AgentRecord{Id: "a", Name: "n", Description: "d", Role: "r", Parent: "p", Scopes: []string{"s1", "s2"},
		State: "busy", OwnerId: "o", Visibility: "v", SessionId: "sid", HomeNode: "h",
		Lifecycle:    &concordv1.LifecycleRecord{CreatedAt: 1, StartedAt: -2, StoppedAt: 3, LastActiveAt: 4, OrphanedAt: 5, ExitReason: "x"},
		Capabilities: []byte(`{}`), CapabilityDescriptor: []byte(`1`), Environment: []byte(`2`), Metadata: []byte(`3`),
		PermissionOverrides: []byte(`4`), PersistentIdentity: []byte(`5`), Relationships: []byte(`6`), Meta: []byte(`7`),
		StateBeforeOrphan: "idle", PersistentId: "pid"}
	session := &concordv1.SessionRecord{Id: "s", ParticipantId: "p", ParticipantType: "agent", Name: "n", HomeNode: "h",
		Connected: true, CreatedAt: 1, LastActiveAt: 2, ClosedAt: 3,
		DisconnectPolicy: &concordv1.DisconnectPolicyRecord{AgentBehavior: "orphan", GracePeriodMs: 5, NotifySubscribers: true},
		DetachedAt:       4, ResumeTokenHash: []byte("hash"), Subscriptions: []*concordv1.SubscriptionRecord{
			{Id: "sub1", SessionId: "s", Filter: []byte(`{}`), Options: []byte(`{"a":1}`), CreatedAt: 6, CursorEventId: "e", CursorSeq: 7},
			{Id: "sub2"},
		}, Epoch: 8, TtlMs: 9, GraceDone: true}
	// An empty bytes field written out: proto.Unmarshal leaves it unset.
	emptyBytes := cat(field(2, string(cat(field(1, "a"), field(16, "")))))
	fast = map[T][][]byte{
		cAgentRegister: {{}, enc(&concordv1.AgentRegisterRequest{Meta: meta, Agent: agent, ResumePersistentIdentity: true, PersistentId: "pid", SessionEpoch: 1 << 40}),
			enc(&concordv1.AgentRegisterRequest{Meta: &concordv1.CommandMeta{}, Agent: &concordv1.AgentRecord{}}), emptyBytes},
		cSessionOpen: {{}, enc(&concordv1.SessionOpenRequest{Meta: meta, Session: session, Resume: true, ReclaimAgents: []string{"a", "b", ""},
			ResumeFromEpoch: 7, ReclaimFromSessions: []string{"s1", "", "s2"}}),
			// Any varint but 0 is true.
			cat(protowire.AppendTag(nil, 3, protowire.VarintType), []byte{0x80, 0x01}),
			enc(&concordv1.SessionOpenRequest{Session: &concordv1.SessionRecord{DisconnectPolicy: &concordv1.DisconnectPolicyRecord{}}})},
		cSessionDetach: {{}, enc(&concordv1.SessionDetachRequest{Meta: meta, SessionId: "s", Reason: "r", Epoch: 1 << 40, TtlMs: -1, HomeNode: "h"})},
		cSessionExpire: {{}, enc(&concordv1.SessionExpireRequest{Meta: meta, SessionId: "s", Epoch: 3, Kind: "ttl"})},
		cSubCursor: {{}, enc(&concordv1.SubscriptionCursorRequest{Meta: meta, Cursors: []*concordv1.SubscriptionCursor{
			{SessionId: "s", SubscriptionId: "sub", EventId: "e", Seq: 1}, {}, {Seq: 1 << 63}}}),
			enc(&concordv1.SubscriptionCursorRequest{Meta: meta, Cursors: []*concordv1.SubscriptionCursor{
				{SessionId: "s", SubscriptionId: "sub", EventId: "e", Seq: 9, SessionEpoch: 3}, {SessionEpoch: 1 << 63}}})},
	}
	other = map[T][][]byte{}
	for typ := range fast {
		other[typ] = [][]byte{
			{0x0a},                          // truncated
			cat(field(99, "unknown")),       // unknown field
			cat(field(2, "\xff")),           // invalid UTF-8 (or a broken nested message)
			cat(field(1, ""), field(1, "")), // meta twice: merged
			cat(protowire.AppendTag(nil, 1, protowire.VarintType), []byte{1}), // wrong wire type
			cat(field(1, string(field(9, "x")))),                              // unknown field in meta
			append(bytes.Clone(fast[typ][1]), 0x10),                           // trailing garbage
		}
	}
	other[cAgentRegister] = append(other[cAgentRegister],
		cat(field(2, string(cat(field(12, ""), field(12, ""))))), // lifecycle twice
		cat(field(2, string(field(6, "\xc3")))),                  // bad UTF-8 in a repeated string
		cat(field(2, string(cat(protowire.AppendTag(nil, 12, protowire.VarintType), []byte{0})))))
	other[cSessionOpen] = append(other[cSessionOpen],
		cat(field(2, string(field(13, string(field(8, "x")))))), // unknown field in a subscription
		cat(field(2, string(field(10, string(field(1, "\xff")))))))
	other[cSubCursor] = append(other[cSubCursor], cat(field(2, string(cat(field(4, "x"))))),
		cat(field(2, string(field(5, "x")))), // session_epoch with the wrong wire type
		cat(field(2, string(cat(protowire.AppendTag(nil, 5, protowire.VarintType), []byte{1},
			protowire.AppendTag(nil, 5, protowire.VarintType), []byte{2})))), // session_epoch twice
		cat(field(2, string(field(6, "x"))))) // a field after session_epoch
	return fast, other
}

// agentUpdateDecode is the registry's Decode for AGENT_UPDATE.
func agentUpdateDecode(t testing.TB) func([]byte) (proto.Message, error) {
	s, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return s.Handlers()[cAgentUpdate].Decode
}

func TestDecode_TablesMatchUnmarshal(t *testing.T) {
	s, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	fast, other := tableBodies(t)
	for _, dt := range decodedTypes[1:] {
		decode := s.Handlers()[dt.typ].Decode
		if decode == nil {
			t.Fatalf("%v has no Decode", dt.typ)
		}
		strict := func(b []byte) (proto.Message, error) {
			m, ok := strictDecode(dt.typ, b)
			if !ok {
				return nil, errors.New("declined")
			}
			return m, nil
		}
		for _, b := range fast[dt.typ] {
			if _, ok := strictDecode(dt.typ, b); !ok {
				t.Errorf("%v body %x: the hand decoder declined it", dt.typ, b)
			}
			sameAsUnmarshal(t, decode, dt.newMsg, b)
			sameAsUnmarshal(t, strict, dt.newMsg, b)
		}
		for _, b := range other[dt.typ] {
			if _, ok := strictDecode(dt.typ, b); ok {
				t.Errorf("%v body %x: the hand decoder took it; proto.Unmarshal should decide", dt.typ, b)
			}
			sameAsUnmarshal(t, decode, dt.newMsg, b)
		}
	}
}

// strictDecode is the hand decoder of typ alone, without the fallback.
func strictDecode(typ T, b []byte) (proto.Message, bool) {
	switch typ {
	case cAgentUpdate:
		return decodeAgentUpdate(b)
	case cAgentRegister:
		return decodeRegister(b)
	case cSessionOpen:
		return decodeOpen(b)
	case cSessionDetach:
		return decodeDetach(b)
	case cSessionExpire:
		return decodeExpire(b)
	case cSubCursor:
		return decodeCursor(b)
	}
	return nil, false
}

func TestDecode_MatchesUnmarshal(t *testing.T) {
	decode := agentUpdateDecode(t)
	if decode == nil {
		t.Fatal("AGENT_UPDATE has no Decode")
	}
	fast, other := agentUpdateBodies(t)
	for _, b := range fast {
		if _, ok := decodeAgentUpdate(b); !ok {
			t.Errorf("body %x: the hand decoder declined it", b)
		}
		sameAsUnmarshal(t, decode, newAgentUpdate, b)
	}
	for _, b := range other {
		if _, ok := decodeAgentUpdate(b); ok {
			t.Errorf("body %x: the hand decoder took it; proto.Unmarshal should decide", b)
		}
		sameAsUnmarshal(t, decode, newAgentUpdate, b)
	}
}

// TestDecode_CopiesItsInput: the decoded message shares no bytes with the
// entry (raft may reuse the buffer; the registry keeps strings and raw
// fields).
func TestDecode_CopiesItsInput(t *testing.T) {
	fast, _ := agentUpdateBodies(t)
	var body []byte // the longest: every field set
	for _, b := range fast {
		if len(b) > len(body) {
			body = bytes.Clone(b)
		}
	}
	m, ok := decodeAgentUpdate(body)
	if !ok {
		t.Fatal("declined")
	}
	want := proto.Clone(m)
	for i := range body {
		body[i] = 'X'
	}
	if !proto.Equal(m, want) {
		t.Fatalf("the message changed with its input: %v, want %v", m, want)
	}
}

// FuzzDecodeCommands: whatever the bytes, decoding them as the FSM
// does matches proto.Unmarshal; whatever the hand decoder takes,
// proto.Unmarshal takes and decodes identically. The first byte picks
// the command type among those with a hand decoder (AGENT_UPDATE for 0).
func FuzzDecodeCommands(f *testing.F) {
	fast, other := agentUpdateBodies(f)
	for _, b := range append(fast, other...) {
		f.Add(byte(0), b)
	}
	tfast, tother := tableBodies(f)
	for k, dt := range decodedTypes {
		for _, b := range append(tfast[dt.typ], tother[dt.typ]...) {
			f.Add(byte(k), b)
		}
	}
	s, err := New(DefaultConfig())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, k byte, body []byte) {
		dt := decodedTypes[int(k)%len(decodedTypes)]
		sameAsUnmarshal(t, s.Handlers()[dt.typ].Decode, dt.newMsg, body)
		if m, ok := strictDecode(dt.typ, body); ok {
			sameAsUnmarshal(t, func([]byte) (proto.Message, error) { return m, nil }, dt.newMsg, body)
		}
	})
}
