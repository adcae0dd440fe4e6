package registry

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/oklog/ulid/v2"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestEventPayloads_MatchMapForm: the hand-appended payloads write
// exactly the bytes json.Marshal wrote for the map payloads they replaced
// (keys sorted, HTML escaped, invalid UTF-8 replaced), so a replica on
// this binary and one on the previous keep identical events.
func TestEventPayloads_MatchMapForm(t *testing.T) {
	texts := []string{"", "agent-1", "idle", "a<b>&c", `q"uote\`, "bad\xffutf8", "line\nsep\u2028", "日本",
		"\x00\x1f\x7f", "tab\tbs\bff\f", "\u2029", "\xc3", "é <é> & end"}
	mapState := func(id, prev, cur, reason string) map[string]any {
		p := map[string]any{"agentId": id, "previous": prev, "current": cur}
		if reason != "" {
			p["reason"] = reason
		}
		return p
	}
	mapConnected := func(s *Session, reconnected bool) map[string]any {
		p := map[string]any{"participantId": s.ParticipantID, "participantType": s.ParticipantType,
			"sessionId": s.ID, "reconnected": reconnected}
		if s.Name != "" {
			p["name"] = s.Name
		}
		return p
	}
	for _, a := range texts {
		for _, b := range texts {
			sess := &Session{ID: a, ParticipantID: b, ParticipantType: a + b, Name: b}
			ts := int64(len(a)*1_000_000_007 - len(b)*3)
			cases := []struct {
				name string
				got  []byte
				want any
			}{
				{"state change", stateChangeData(a, b, a+b, b), mapState(a, b, a+b, b)},
				{"state change, no reason", stateChangeData(b, a, b, ""), mapState(b, a, b, "")},
				{"member", memberData(a, b), map[string]any{"scopeId": a, "agentId": b}},
				{"connected", connectedData(sess, a == b), mapConnected(sess, a == b)},
				{"disconnected", disconnectedData(a, b, a+b), map[string]any{"participantId": a, "sessionId": b, "reason": a + b}},
				{"unregistered", unregisteredData(a, b), map[string]any{"agentId": a, "reason": b}},
				{"orphaned", orphanedData(a, b, a+b, b+a, ts), map[string]any{"agentId": a, "previousOwnerId": b,
					"previousState": a + b, "sessionId": b + a, "orphanedAt": ts}},
			}
			agent := Agent{ID: a, Name: b, Description: a + b, Role: b, Parent: a, Scopes: []string{a, b}, State: b,
				Visibility: a, OwnerID: b, SessionID: a, HomeNode: b,
				Lifecycle: Lifecycle{CreatedAt: ts, LastActiveAt: ts + 1, ExitReason: a},
				Metadata:  json.RawMessage(` { "k" : "<v> \u2028 &" , "n" : [ 1 , 2 ] } `), Capabilities: json.RawMessage(`{"x":"\u003c"}`),
				Environment: json.RawMessage(`"line\u2028sep"`), PermissionOverrides: json.RawMessage("\" \"")}
			cases = append(cases, struct {
				name string
				got  []byte
				want any
			}{"registered", registeredData(&agent), map[string]any{"agent": agent}})
			for _, c := range cases {
				want, err := json.Marshal(c.want)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(c.got, want) {
					t.Errorf("%s (%q, %q): got %s, want %s", c.name, a, b, c.got, want)
				}
			}
		}
	}
}

// FuzzAppendMarshaledString: any string is appended as json.Marshal
// writes it.
func FuzzAppendMarshaledString(f *testing.F) {
	for _, s := range []string{"", "agent-1", "a<b>&c", "bad\xffutf8", "\u2028", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendMarshaledString([]byte("x"), s); !bytes.Equal(got[1:], want) || got[0] != 'x' {
			t.Errorf("appendMarshaledString(%q) = %s, want %s", s, got[1:], want)
		}
	})
}

// TestState_ReusedTxnStartsEmpty: the txn the State reuses for every
// command carries nothing from the previous one: no pending event, no id
// taken (an id a refused command took is free again), and no reference
// left in the slice it keeps.
func TestState_ReusedTxnStartsEmpty(t *testing.T) {
	h := newHarness(t, 100)
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	tx := h.s.begin(1, meta(testULID(1)))
	if got := tx.eventID(); got != testULID(1) {
		t.Fatalf("first id %s, want the proposer's %s", got, testULID(1))
	}
	tx.emitData(EventAgentStateChanged, stateChangeData("a", "idle", "busy", ""), []string{"a"}, nil)
	held := tx.pending[:1]

	tx = h.s.begin(2, meta(testULID(1)))
	if len(tx.pending) != 0 || tx.nextID != 0 || tx.haveID || tx.index != 2 {
		t.Fatalf("reused txn kept state: %+v", tx)
	}
	if held[0].ID != "" || held[0].Data != nil {
		t.Errorf("the kept slice still references the previous command's event: %+v", held[0])
	}
	if got := tx.eventID(); got != testULID(1) {
		t.Errorf("an id taken by the previous (never appended) command was refused: got %s", got)
	}
}

// TestState_ReusedTxnDropsLargeBuffers: a command with many events does
// not leave its large slice and map on the State for good.
func TestState_ReusedTxnDropsLargeBuffers(t *testing.T) {
	h := newHarness(t, 1000)
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	tx := h.s.begin(1, &concordv1.CommandMeta{TimestampMs: 1})
	for range 3 * keepPendingCap {
		tx.emitData(EventScopeMemberJoined, memberData("s", "a"), []string{"a"}, []string{"s"})
	}
	tx = h.s.begin(2, &concordv1.CommandMeta{TimestampMs: 2})
	if cap(tx.pending) > keepPendingCap || len(tx.taken) != 0 || tx.taken != nil {
		t.Errorf("kept pending cap %d, taken %d entries (map %v)", cap(tx.pending), len(tx.taken), tx.taken != nil)
	}
}

// TestApply_AgentUpdateAllocs bounds the allocations of one
// map/agents/update apply (state change, one event) on a replica.
func TestApply_AgentUpdateAllocs(t *testing.T) {
	h := newHarness(t, 100)
	h.must(cAgentRegister, register("a1"))
	hd := h.s.Handlers()[cAgentUpdate]
	states := []string{"busy", "idle"}
	n := 0
	allocs := testing.AllocsPerRun(200, func() {
		n++
		st := states[n%2]
		h.index++
		if _, err := hd.Apply(h.index, &concordv1.AgentUpdateRequest{Meta: metaAt(int64(n), testULID(uint64(n))), AgentId: "a1", State: &st}); err != nil {
			t.Fatal(err)
		}
	})
	// 26 before the payloads became structs and the txn was reused (the
	// map payload, reflection over it, a txn and its map), 11 before the
	// payload was appended by hand. Now 10: the agent entry and the
	// result's box, the event's Data and agent slice, the notify channel,
	// and the 5 this test's request takes.
	t.Logf("%.0f allocations per agent update apply", allocs)
	if allocs > 10 {
		t.Errorf("%.0f allocations per agent update apply, want at most 10", allocs)
	}
}

// testULID is a valid ULID string made from n (time n ms, entropy n).
func testULID(n uint64) string {
	var u ulid.ULID
	_ = u.SetTime(n)
	binary.BigEndian.PutUint64(u[8:], n)
	return u.String()
}
