package registry

import (
	"bytes"
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
	}
	fast = [][]byte{
		{}, // an empty body: every field unset
		enc(&concordv1.AgentUpdateRequest{Meta: meta, AgentId: "agent-0001", State: proto.String("idle")}),
		enc(&concordv1.AgentUpdateRequest{Meta: meta, AgentId: "agent-0001", State: proto.String("")}),
		enc(&concordv1.AgentUpdateRequest{Meta: meta, AgentId: "a", State: proto.String("orphaned"), Reason: "r"}),
		enc(&concordv1.AgentUpdateRequest{Meta: &concordv1.CommandMeta{}, AgentId: "a"}),
		enc(&concordv1.AgentUpdateRequest{Meta: &concordv1.CommandMeta{EventIds: []string{"x", "y", "z", "w"}}}),
		enc(&concordv1.AgentUpdateRequest{Metadata: []byte{}, Capabilities: []byte{}}),
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
}

func newAgentUpdate() proto.Message { return new(concordv1.AgentUpdateRequest) }

// agentUpdateDecode is the registry's Decode for AGENT_UPDATE.
func agentUpdateDecode(t testing.TB) func([]byte) (proto.Message, error) {
	s, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return s.Handlers()[cAgentUpdate].Decode
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

// FuzzDecodeAgentUpdate: whatever the bytes, decoding them as the FSM
// does matches proto.Unmarshal; whatever the hand decoder takes,
// proto.Unmarshal takes and decodes identically.
func FuzzDecodeAgentUpdate(f *testing.F) {
	fast, other := agentUpdateBodies(f)
	for _, b := range append(fast, other...) {
		f.Add(b)
	}
	decode := agentUpdateDecode(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		sameAsUnmarshal(t, decode, newAgentUpdate, body)
		if m, ok := decodeAgentUpdate(body); ok {
			sameAsUnmarshal(t, func([]byte) (proto.Message, error) { return m, nil }, newAgentUpdate, body)
		}
	})
}
