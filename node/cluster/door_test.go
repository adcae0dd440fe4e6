package cluster

import (
	"encoding/json"
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// A rogue caller of Forward (an in-process gRPC client, no credentials in
// this test) cannot put a command into the log that the leader cannot
// vouch for: an unknown type (ignorable bit or not), a registry body
// smuggled under the NOOP byte, or a known type whose body does not decode.
// Each is refused with INVALID_ARGUMENT and its ForwardError reason, by
// Forward and on a ForwardStream, and the log does not move.
func TestForward_RefusesWhatTheLeaderCannotVouchFor(t *testing.T) {
	nodes, _ := newTestCluster(t, 1, true)
	leader, _ := leaderOf(t, nodes)
	c := client(t, leader.srv.addr)
	ctx := testCtx(t)
	register := &concordv1.AgentRegisterRequest{
		Meta:  &concordv1.CommandMeta{NodeId: "rogue"},
		Agent: &concordv1.AgentRecord{Id: "forged-agent", Name: "forged"},
	}
	body, err := proto.Marshal(register)
	if err != nil {
		t.Fatal(err)
	}
	unknown := concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_UNKNOWN_COMMAND
	invalid := concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_INVALID_COMMAND
	tests := []struct {
		name    string
		command []byte
		want    concordv1.ForwardErrorReason
	}{
		{"register body under type 200", append([]byte{200}, body...), unknown},
		{"register body under type 255 (noop)", append([]byte{255}, body...), invalid},
		{"ignorable unknown type 0x81", append([]byte{0x81}, body...), unknown},
		{"unknown type 100", append([]byte{100}, body...), unknown},
		{"register type with a garbage body", []byte{byte(concordv1.CommandType_COMMAND_TYPE_AGENT_REGISTER), 0xff, 0xff, 0xff}, invalid},
		{"type zero", []byte{0}, invalid},
		{"empty", nil, invalid},
	}
	// A valid command first, so the leader's start-up entries are applied
	// before the index is taken.
	ok, err := c.Forward(ctx, &concordv1.ForwardRequest{Command: encode(t, concordv1.CommandType_COMMAND_TYPE_NOOP, &concordv1.Noop{Note: "ok"})})
	if err != nil {
		t.Fatalf("Forward of a NOOP: %v", err)
	}
	if err := leader.store.WaitApplied(ctx, ok.GetIndex()); err != nil {
		t.Fatal(err)
	}
	before := leader.store.AppliedIndex()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Forward(ctx, &concordv1.ForwardRequest{Command: tt.command, OriginNodeId: "rogue"})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("Forward = %v, want InvalidArgument", err)
			}
			if got := forwardReason(err); got != tt.want {
				t.Fatalf("reason %s, want %s", got, tt.want)
			}
		})
	}
	// The same commands in one batch on a ForwardStream: each is answered
	// by id with the status Forward gave it.
	stream, err := c.ForwardStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	batch := &concordv1.ForwardBatch{OriginNodeId: "rogue"}
	for i, tt := range tests {
		batch.Items = append(batch.Items, &concordv1.ForwardItem{Id: uint64(i + 1), Command: tt.command, TimeoutMs: 5000})
	}
	if err := stream.Send(batch); err != nil {
		t.Fatal(err)
	}
	for answered := 0; answered < len(tests); {
		rep, err := stream.Recv()
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		for _, r := range rep.GetReplies() {
			answered++
			tt := tests[r.GetId()-1]
			st := status.Convert(itemStatus(r.GetError()))
			if r.GetError() == nil || st.Code() != codes.InvalidArgument || forwardReason(st.Err()) != tt.want {
				t.Errorf("%s on the stream = %v, want InvalidArgument %s", tt.name, st, tt.want)
			}
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if after := leader.store.AppliedIndex(); after != before {
		t.Fatalf("applied index moved from %d to %d: a refused command reached the log", before, after)
	}
	if _, ok := leader.reg.Agent("forged-agent"); ok {
		t.Fatal("the forged agent was registered")
	}
}

func forwardReason(err error) concordv1.ForwardErrorReason {
	for _, d := range status.Convert(err).Details() {
		if fe, ok := d.(*concordv1.ForwardError); ok {
			return fe.GetReason()
		}
	}
	return concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_UNSPECIFIED
}

// A rogue relay stream cannot hand a client a frame it cannot parse, nor
// an object that is not a MAP Message: each such envelope is acknowledged
// as BAD_ENVELOPE and never reaches the recipient; a valid one does.
func TestRelay_RefusesMalformedFrames(t *testing.T) {
	rec := newRecorder()
	srv := startServer(t, testConfig(t, "b"), ServerDeps{Store: &fakeStore{id: "b"}, Deliverer: rec}, nil)
	stream, err := client(t, srv.addr).Relay(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	bad := []string{
		`NOT JSON }}}`,
		`{"id":"m1","from":"victim-a","to":{"agent":"x"}`, // truncated
		`[1,2,3]`,
		`"a string"`,
		`{"id":"m1","to":{"agent":"x"}}`, // no from
		`{"id":"","from":"a","to":{"agent":"x"}}`,     // empty id
		`{"id":"m1","from":7,"to":{"agent":"x"}}`,     // from not a string
		`{"id":"m1","from":"a"}`,                      // no to
		`{"id":"m1","from":"a","to":1} trailing`,      // data after the value
		"{\"id\":\"m1\",\"from\":\"a\xff\",\"to\":1}", // invalid UTF-8
	}
	batch := &concordv1.RelayBatch{FromNodeId: "rogue"}
	for i, m := range bad {
		batch.Envelopes = append(batch.Envelopes, &concordv1.RelayEnvelope{
			Seq: uint64(i + 1), Kind: concordv1.RelayKind_RELAY_KIND_MESSAGE, Message: []byte(m), RecipientAgentId: "x",
		})
	}
	good := mapMsg("ok")
	batch.Envelopes = append(batch.Envelopes,
		&concordv1.RelayEnvelope{Seq: uint64(len(bad) + 1), Kind: concordv1.RelayKind_RELAY_KIND_MESSAGE, Message: []byte(good), RecipientAgentId: "x"},
		&concordv1.RelayEnvelope{Seq: uint64(len(bad) + 2), Kind: concordv1.RelayKind_RELAY_KIND_EVENT,
			Event: &concordv1.RelayEvent{Id: "e1", Type: "message_sent", Data: []byte(`NOT JSON`)}},
	)
	if err := stream.Send(batch); err != nil {
		t.Fatal(err)
	}
	ack, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v", err)
	}
	if want := len(bad) + 1; len(ack.GetFailures()) != want {
		t.Fatalf("%d failures, want %d: %v", len(ack.GetFailures()), want, ack.GetFailures())
	}
	for _, f := range ack.GetFailures() {
		if f.GetCode() != concordv1.RelayFailureCode_RELAY_FAILURE_CODE_BAD_ENVELOPE {
			t.Errorf("seq %d: code %s, want BAD_ENVELOPE", f.GetSeq(), f.GetCode())
		}
	}
	if got := rec.messages("x"); len(got) != 1 || got[0] != good {
		t.Fatalf("delivered %q, want only the valid message", got)
	}
}

func TestCheckRelayEvent(t *testing.T) {
	tests := []struct {
		name string
		ev   *concordv1.RelayEvent
		ok   bool
	}{
		{"valid", &concordv1.RelayEvent{Id: "e", Type: "t", Data: []byte(`{"a":1}`)}, true},
		{"no data", &concordv1.RelayEvent{Id: "e", Type: "t"}, true},
		{"nil", nil, false},
		{"no id", &concordv1.RelayEvent{Type: "t"}, false},
		{"no type", &concordv1.RelayEvent{Id: "e"}, false},
		{"data not JSON", &concordv1.RelayEvent{Id: "e", Type: "t", Data: []byte(`{"a":`)}, false},
		{"data an array", &concordv1.RelayEvent{Id: "e", Type: "t", Data: []byte(`[1]`)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := checkRelayEvent(tt.ev); (err == nil) != tt.ok {
				t.Fatalf("checkRelayEvent = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// FuzzCheckRelayMessage: whatever a peer sends, the check never panics, and
// what it accepts is a JSON object a client can parse.
func FuzzCheckRelayMessage(f *testing.F) {
	for _, s := range []string{mapMsg("m"), `NOT JSON }}}`, `{}`, `{"id":"a","from":"b","to":null}`, `{"id":"\"","from":"\\","to":[]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		if checkRelayMessage(msg) != nil {
			return
		}
		var v map[string]any
		if err := json.Unmarshal(msg, &v); err != nil {
			t.Fatalf("accepted %q, which does not parse as an object: %v", msg, err)
		}
		if id, _ := v["id"].(string); id == "" {
			t.Fatalf("accepted %q without a string id", msg)
		}
	})
}
