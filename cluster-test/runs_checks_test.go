package clustertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/client/argueclient"
)

// Checks every replicated-run scenario ends with.

// Result fields that come from the clock, and why a comparison between a
// disturbed cluster run and the reference drops them. The engine reads no
// clock itself: each of these is the time of an input (the `time_ms` its
// proposer put in the log), which is when something happened on the wall
// clock of some node, so no two runs share them:
//
//   - metrics.elapsedMs: the time between the start input and the input
//     that finished the run;
//   - rounds[].outputs[].respondedAt: when the node that received the
//     agent's reply handled it;
//   - eliminations[].at: the time of the input that eliminated (a timer
//     firing on the leader, or the failing reply).
//
// Nothing else is excluded. The session id is compared too: the reference
// run uses the cluster run's id. Values that merely depend on arrival
// order are not excluded either: the engine records outputs in dispatch
// order, so arrival order must not show in the result.
var resultTimingFields = []string{"metrics.elapsedMs", "rounds[].outputs[].respondedAt", "eliminations[].at"}

// requireSameResult compares a cluster run's result with the reference,
// timing fields excluded, and reports every difference by path.
func requireSameResult(t testing.TB, got json.RawMessage, want *consensus.Result) {
	t.Helper()
	wantRaw, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	g, err := untimedResult(got)
	if err != nil {
		t.Fatalf("cluster result: %v\n%s", err, got)
	}
	w, err := untimedResult(wantRaw)
	if err != nil {
		t.Fatalf("reference result: %v", err)
	}
	if diffs := jsonDiff("", g, w, nil); len(diffs) > 0 {
		if len(diffs) > 20 {
			diffs = append(diffs[:20], fmt.Sprintf("... %d more", len(diffs)-20))
		}
		t.Fatalf("cluster result differs from the undisturbed reference (timing fields %v excluded):\n  %s",
			resultTimingFields, strings.Join(diffs, "\n  "))
	}
}

// untimedResult decodes a result and deletes its timing fields.
func untimedResult(raw json.RawMessage) (map[string]any, error) {
	var r map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&r); err != nil {
		return nil, err
	}
	if m, ok := r["metrics"].(map[string]any); ok {
		delete(m, "elapsedMs")
	}
	for _, rd := range asList(r["rounds"]) {
		for _, o := range asList(asMap(rd)["outputs"]) {
			delete(asMap(o), "respondedAt")
		}
	}
	for _, e := range asList(r["eliminations"]) {
		delete(asMap(e), "at")
	}
	return r, nil
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	if m == nil {
		return map[string]any{}
	}
	return m
}

// jsonDiff appends "path: got X, want Y" for every difference.
func jsonDiff(path string, got, want any, out []string) []string {
	gm, gok := got.(map[string]any)
	wm, wok := want.(map[string]any)
	if gok && wok {
		keys := map[string]bool{}
		for k := range gm {
			keys[k] = true
		}
		for k := range wm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			out = jsonDiff(path+"."+k, gm[k], wm[k], out)
		}
		return out
	}
	gl, gok := got.([]any)
	wl, wok := want.([]any)
	if gok && wok && len(gl) == len(wl) {
		for i := range gl {
			out = jsonDiff(fmt.Sprintf("%s[%d]", path, i), gl[i], wl[i], out)
		}
		return out
	}
	if !reflect.DeepEqual(got, want) {
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		out = append(out, fmt.Sprintf("%s: cluster %.200s, reference %.200s", path, gb, wb))
	}
	return out
}

// runEvents summarises a run's engine events.
type runEvents struct {
	types map[string]int
	// responded counts ParticipantResponded per "phase/round/participant".
	responded map[string]int
	// eliminated lists ParticipantEliminated participants in order.
	eliminated []string
}

func summariseEvents(t testing.TB, events []json.RawMessage) runEvents {
	t.Helper()
	s := runEvents{types: map[string]int{}, responded: map[string]int{}}
	for _, raw := range events {
		var ev struct {
			Type    string `json:"type"`
			Payload struct {
				Phase         string `json:"phase"`
				Round         int    `json:"round"`
				ParticipantID string `json:"participantId"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatalf("event %s: %v", raw, err)
		}
		s.types[ev.Type]++
		switch ev.Type {
		case consensus.EventParticipantResponded:
			s.responded[fmt.Sprintf("%s/%d/%s", ev.Payload.Phase, ev.Payload.Round, ev.Payload.ParticipantID)]++
		case consensus.EventParticipantEliminated:
			s.eliminated = append(s.eliminated, ev.Payload.ParticipantID)
		}
	}
	return s
}

// requireEachOnce checks that every answer was counted once and the run
// ended exactly once, however often tasks were re-sent or replies repeated.
func (s runEvents) requireEachOnce(t testing.TB) {
	t.Helper()
	for k, n := range s.responded {
		if n != 1 {
			t.Errorf("ParticipantResponded %s committed %d times", k, n)
		}
	}
	if n := s.types[consensus.EventFinalized] + s.types[consensus.EventFailed]; n != 1 {
		t.Errorf("run ended %d times (Finalized %d, Failed %d)", n, s.types[consensus.EventFinalized], s.types[consensus.EventFailed])
	}
	if s.types[consensus.EventSessionStarted] != 1 {
		t.Errorf("SessionStarted %d times", s.types[consensus.EventSessionStarted])
	}
}

// requireUndisturbedOutcome is how a failover scenario's run must end:
// finished, nobody eliminated, every answer counted once, and the result
// of the undisturbed reference run.
func requireUndisturbedOutcome(t testing.TB, info *argueclient.RunInfo, rr runRequest, s *consensus.Script) {
	t.Helper()
	if info.Status != argueclient.StatusFinished {
		t.Fatalf("run %s ended %s (%+v), want finished", info.RunID, info.Status, info.Error)
	}
	if len(info.Eliminations) > 0 {
		t.Fatalf("run %s eliminated %+v; a failover must not eliminate anyone", info.RunID, info.Eliminations)
	}
	ev := summariseEvents(t, info.Events)
	ev.requireEachOnce(t)
	if len(ev.eliminated) > 0 {
		t.Fatalf("ParticipantEliminated events for %v", ev.eliminated)
	}
	requireSameResult(t, info.Result, referenceResult(t, rr, s, info.RunID))
}

// requireRunReplicated waits until every client's node serves the same
// run (summary, result and every event) byte for byte: the replicas
// applied the same inputs.
func requireRunReplicated(t testing.TB, runID string, clients ...*Client) {
	t.Helper()
	params := map[string]any{"runId": runID, "include": []string{"result", "events", "state"}}
	Eventually(t, ConvergeTimeout, func() error {
		var first json.RawMessage
		for k, cl := range clients {
			raw, err := cl.Call(argueclient.MethodGet, params)
			if err != nil {
				return fmt.Errorf("get on %s: %s", cl.url, Describe(err))
			}
			if k == 0 {
				first = raw
				continue
			}
			if !bytes.Equal(raw, first) {
				return fmt.Errorf("%s serves a different run than %s:\n%.300s\n%.300s", cl.url, clients[0].url, raw, first)
			}
		}
		return nil
	})
}

// clusterReaders connects one client per running node, for
// requireRunReplicated.
func clusterReaders(t testing.TB, c *Cluster) []*Client {
	t.Helper()
	var out []*Client
	for _, n := range c.Running() {
		out = append(out, c.Connect(t, n.Index, map[string]any{"participantType": "client"}))
	}
	return out
}

// requireNoneOf fails when any of ids is in list.
func requireNoneOf(t testing.TB, what string, list []string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if slices.Contains(list, id) {
			t.Fatalf("%s contains %s: %v", what, id, list)
		}
	}
}
