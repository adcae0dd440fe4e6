package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

var updateReplay = flag.Bool("update-replay", false, "rewrite testdata/replay.golden (only for an intended change of replicated state)")

// TestReplay_MatchesGolden: replicas running different binaries must reach
// the same state from the same log, byte for byte. testdata/replay.golden
// holds, per workload, the digest of the snapshot records (every agent,
// scope and session, and the event window: ids, positions, Data bytes,
// subjects) after a log is applied, written by the binary of commit
// fa0db43, before the apply path was optimised (event ring, hand-appended
// payloads). The workloads: random logs over every command type with a
// window small enough to wrap many times, a snapshot restored midway (also
// into a smaller window), and commands whose texts need JSON escapes.
// Rewrite the file only when replicated state is meant to change, and
// then only with a new command type or format version; a change to
// randomCommands also changes the digests, so regenerate them then with
// the previous commit's registry code (the test file copied there).
func TestReplay_MatchesGolden(t *testing.T) {
	golden := filepath.Join("testdata", "replay.golden")
	var got strings.Builder
	for _, w := range []struct {
		name          string
		seed          int64
		n, window     int
		restoreAt     int
		restoreWindow int
	}{
		{"random-42-window-64", 42, 3000, 64, 0, 0},
		{"random-7-window-500", 7, 3000, 500, 0, 0},
		{"random-9-window-50-restore", 9, 2000, 50, 1200, 50},
		{"random-11-window-300-restore-smaller", 11, 2000, 300, 900, 40},
	} {
		steps := randomCommands(w.seed, w.n)
		h := newHarness(t, w.window)
		if w.restoreAt > 0 {
			run(h, steps[:w.restoreAt])
			fresh := newHarness(t, w.restoreWindow)
			commit, err := fresh.s.Restore(reader(snapshotBytes(t, h.s)))
			if err != nil {
				t.Fatal(err)
			}
			commit()
			fresh.index = h.index
			h, steps = fresh, steps[w.restoreAt:]
		}
		run(h, steps)
		for _, st := range escapeCommands() {
			h.must(st.typ, st.msg)
		}
		digest := sha256.New()
		recs := snapshotBytes(t, h.s)
		for _, r := range recs {
			fmt.Fprintf(digest, "%d:", len(r))
			digest.Write(r)
		}
		oldest, last := h.s.Window()
		fmt.Fprintf(&got, "%s records=%d window=%d-%d sha256=%s\n", w.name, len(recs), oldest, last, hex.EncodeToString(digest.Sum(nil)))
	}
	if *updateReplay {
		if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		t.Errorf("replicated state differs from %s\ngot:\n%swant:\n%s", golden, got.String(), want)
	}
}

// escapeCommands emit every hand-appended payload with texts that need
// JSON escapes (HTML characters, quotes, control characters, U+2028,
// non-ASCII): connect, register, state change with a reason, permissions
// and environment, scope join and leave, orphaning and unregistering
// detaches, an unregister, a resume, a close.
func escapeCommands() []step {
	texts := []string{`<b>&"q"\`, "tab\tnl\nbs\bnul\x00", "line\u2028sep\u2029", "日本 é", "x-<state>"}
	ts := int64(1_900_000_000_000)
	m := func(ids ...string) *concordv1.CommandMeta {
		ts += 7
		return &concordv1.CommandMeta{TimestampMs: ts, EventIds: ids, NodeId: "n<1>", Source: texts[0]}
	}
	var out []step
	for i, tx := range texts {
		sid, aid, scid := fmt.Sprintf("esc-s%d-%s", i, tx), fmt.Sprintf("esc-a%d-%s", i, tx), fmt.Sprintf("esc-sc%d-%s", i, tx)
		policy := []string{BehaviorOrphan, BehaviorUnregister, BehaviorGracePeriod}[i%3]
		note, _ := json.Marshal(map[string]string{"note": tx})
		add := func(typ T, msg proto.Message) { out = append(out, step{typ, msg}) }
		add(cSessionOpen, &concordv1.SessionOpenRequest{Meta: m(), Session: &concordv1.SessionRecord{
			Id: sid, ParticipantId: "p" + tx, ParticipantType: tx, Name: tx, HomeNode: "n" + tx,
			DisconnectPolicy: &concordv1.DisconnectPolicyRecord{AgentBehavior: policy, GracePeriodMs: 5}}})
		add(cScopeCreate, &concordv1.ScopeCreateRequest{Meta: m(), Scope: &concordv1.ScopeRecord{Id: scid, Name: tx}})
		add(cAgentRegister, &concordv1.AgentRegisterRequest{Meta: m(), Agent: &concordv1.AgentRecord{
			Id: aid, Name: tx, OwnerId: "p" + tx, SessionId: sid, HomeNode: "n" + tx, Scopes: []string{scid}}})
		add(cAgentUpdate, &concordv1.AgentUpdateRequest{Meta: m(), AgentId: aid, State: proto.String("busy"), Reason: tx})
		add(cAgentUpdate, &concordv1.AgentUpdateRequest{Meta: m(), AgentId: aid, State: proto.String(fmt.Sprintf("x-custom%d", i)),
			PermissionOverrides: note, Environment: []byte(`{"k":"<v>"}`)})
		add(cScopeLeave, &concordv1.ScopeLeaveRequest{Meta: m(), ScopeId: scid, AgentId: aid})
		add(cScopeJoin, &concordv1.ScopeJoinRequest{Meta: m(), ScopeId: scid, AgentId: aid})
		add(cAgentRegister, &concordv1.AgentRegisterRequest{Meta: m(), Agent: &concordv1.AgentRecord{
			Id: aid + "-2", OwnerId: "p" + tx, SessionId: sid, Scopes: []string{scid}}})
		add(cAgentUnregister, &concordv1.AgentUnregisterRequest{Meta: m(), AgentId: aid + "-2", Reason: tx})
		add(cSessionDetach, &concordv1.SessionDetachRequest{Meta: m(), SessionId: sid, Epoch: 1, Reason: tx, TtlMs: 1})
		add(cSessionOpen, &concordv1.SessionOpenRequest{Meta: m(), Resume: true, Session: &concordv1.SessionRecord{Id: sid, HomeNode: "n" + tx}})
		add(cSessionClose, &concordv1.SessionCloseRequest{Meta: m(), SessionId: sid, Epoch: 3, Reason: tx})
	}
	return out
}
