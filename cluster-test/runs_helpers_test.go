package clustertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/client/argueclient"
	"github.com/concordmap/concord/node/client/mapclient"
	"github.com/concordmap/concord/node/rpc"
)

// Shared pieces of the replicated-run scenarios: requests, the observer
// client, the reference run and the checks every scenario ends with.

// runParticipants are the debaters of every scenario.
var runParticipants = []string{"alice", "bob", "carol"}

// runTaskTimeoutMs is the engine's per-task timeout in the failover
// scenarios: far beyond any election and reconnect, so that a fault never
// eliminates anyone and the result must equal the undisturbed one.
const runTaskTimeoutMs = 60_000

// runDoneTimeout bounds one scenario run from start to its end.
var runDoneTimeout = scaled(60 * time.Second)

// runRequest is a start request: the JSON sent to the cluster and the
// parsed request the reference run uses.
type runRequest struct {
	id  string
	raw json.RawMessage
	req *consensus.Request
}

// newRunRequest builds a small debate (3 agents, maxRounds 2) whose report
// is written by reporter (composer representative, so there is a report
// task).
func newRunRequest(t testing.TB, requestID, reporter string, perTaskMs int64) runRequest {
	t.Helper()
	return newRunRequestOf(t, requestID, reporter, perTaskMs, runParticipants)
}

// newRunRequestOf is newRunRequest with other participants.
func newRunRequestOf(t testing.TB, requestID, reporter string, perTaskMs int64, participants []string) runRequest {
	t.Helper()
	parts := make([]map[string]any, 0, len(participants))
	for _, id := range participants {
		parts = append(parts, map[string]any{"id": id})
	}
	obj := map[string]any{
		"requestId":     requestID,
		"task":          "Should the session cache be sharded across regions?",
		"participants":  parts,
		"roundPolicy":   map[string]any{"minRounds": 1, "maxRounds": 2},
		"reportPolicy":  map[string]any{"composer": "representative", "representativeId": reporter},
		"waitingPolicy": map[string]any{"perTaskTimeoutMs": perTaskMs, "perRoundTimeoutMs": 2 * perTaskMs},
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	req, err := consensus.ParseRequest(raw)
	if err != nil {
		t.Fatalf("request %s: %v", requestID, err)
	}
	return runRequest{id: requestID, raw: raw, req: req}
}

// personaScript answers every task with the deterministic persona, plus
// the given scripted answers.
func personaScript(agents map[string]map[string]consensus.Answer) *consensus.Script {
	if agents == nil {
		agents = map[string]map[string]consensus.Answer{}
	}
	return &consensus.Script{Version: 1, Persona: true, Agents: agents}
}

// referenceResult runs the request in process with the same script and
// the cluster run's id as session id: the result an undisturbed run gives.
func referenceResult(t testing.TB, rr runRequest, s *consensus.Script, runID string) *consensus.Result {
	t.Helper()
	lr, err := consensus.Simulate(context.Background(), rr.req, s, consensus.SimOptions{SessionID: runID, StartMs: 1})
	if err != nil {
		t.Fatalf("reference run: %v", err)
	}
	if lr.Result == nil {
		t.Fatalf("reference run ended without a result: %+v", lr.Failure)
	}
	return lr.Result
}

// runsObserver is the client that starts and watches runs: a mapclient
// that fails over between nodes, like `concord argue`.
type runsObserver struct {
	c    *mapclient.Client
	runs argueclient.Runs
}

func newRunsObserver(t testing.TB, urls []string) *runsObserver {
	t.Helper()
	cfg := runClientConfig(t, "observer", urls)
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	c, err := mapclient.Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("observer: dial %v: %v", urls, err)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = c.Close(cctx)
	})
	return &runsObserver{c: c, runs: argueclient.Runs{C: c}}
}

// start starts the run and returns its id. Refusals that wrote nothing
// (an agent not yet known to the node: 2001; the cluster busy: 4000) are
// retried; argueclient's Start never repeats a start that may have landed.
func (o *runsObserver) start(t testing.TB, rr runRequest) string {
	t.Helper()
	var runID string
	err := Poll(context.Background(), CallTimeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
		defer cancel()
		res, err := o.runs.Start(ctx, rr.raw, rr.id)
		switch {
		case err == nil:
			runID = res.RunID
			return nil
		case rpc.IsCode(err, rpc.CodeAgentNotFound), IsRetryable(err):
			return err
		}
		return Permanent(err)
	})
	if err != nil {
		t.Fatalf("start %s: %s", rr.id, Describe(err))
	}
	return runID
}

// get reads the run (from the observer's current node).
func (o *runsObserver) get(runID string, include ...string) (*argueclient.RunInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	return o.runs.Get(ctx, runID, include...)
}

// waitRun polls the run until cond accepts it and returns what it saw.
func (o *runsObserver) waitRun(t testing.TB, runID string, timeout time.Duration, cond func(*argueclient.RunInfo) error, include ...string) *argueclient.RunInfo {
	t.Helper()
	var info *argueclient.RunInfo
	Eventually(t, timeout, func() error {
		got, err := o.get(runID, include...)
		if err != nil {
			return err
		}
		info = got
		return cond(got)
	})
	return info
}

// waitDone waits until the run is over and returns it with its result and
// events.
func (o *runsObserver) waitDone(t testing.TB, runID string) *argueclient.RunInfo {
	t.Helper()
	o.waitRun(t, runID, runDoneTimeout, func(r *argueclient.RunInfo) error {
		if r.Status == argueclient.StatusRunning {
			return fmt.Errorf("run %s still running: phase %s round %d", runID, r.Phase, r.Round)
		}
		return nil
	})
	info, err := o.get(runID, "result", "events")
	if err != nil {
		t.Fatalf("get %s: %v", runID, err)
	}
	return info
}

// requirePhase waits until the observer's replica shows the run running
// in phase (a follower's replica may be a commit behind what the agents
// were sent).
func (o *runsObserver) requirePhase(t testing.TB, runID, phase string) {
	t.Helper()
	o.waitRun(t, runID, ConvergeTimeout, func(r *argueclient.RunInfo) error {
		err := fmt.Errorf("run %s is %s in phase %q, want running in %q", runID, r.Status, r.Phase, phase)
		switch {
		case r.Status != argueclient.StatusRunning:
			return Permanent(err)
		case r.Phase != phase:
			return err
		}
		return nil
	})
}

// requireMAPCode checks err is the MAP error code and, when reason is not
// empty, that data.details.reason is one of the reasons given.
func requireMAPCode(t testing.TB, what string, err error, code int, reasons ...string) {
	t.Helper()
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != code {
		t.Fatalf("%s: want MAP error %d, got %s", what, code, Describe(err))
	}
	if len(reasons) == 0 {
		return
	}
	got := ""
	if re.Data != nil {
		got, _ = re.Data.Details["reason"].(string)
	}
	for _, r := range reasons {
		if got == r {
			return
		}
	}
	t.Fatalf("%s: details.reason %q, want one of %v (%s)", what, got, reasons, Describe(err))
}

// consistently checks that check keeps passing for d (polled every
// PollInterval): how a scenario asserts that something does NOT happen
// during a window (a paused run, a session that must stay attached).
func consistently(t testing.TB, d time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if err := check(); err != nil {
			t.Fatalf("stopped holding after %v of %v: %v", d-time.Until(deadline), d, err)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(PollInterval) // sampling a window: there is nothing to wait for
	}
}
