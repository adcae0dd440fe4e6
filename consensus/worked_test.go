package consensus

import (
	"fmt"
	"reflect"
	"testing"
)

func TestWorkedExample_Section21(t *testing.T) {
	run := runScript(t, mustRequest(t, fmt.Sprintf(workedRequest, 1)), workedExample())
	if run.Failure != nil {
		t.Fatalf("run failed: %+v", run.Failure)
	}
	res := run.Result
	if res.Status != StatusPartialConsensus {
		t.Errorf("status = %s, want partial_consensus", res.Status)
	}
	if res.Metrics.TotalRounds != 4 || !res.Metrics.EarlyStopTriggered {
		t.Errorf("metrics = %+v, want totalRounds 4 and early stop", res.Metrics)
	}
	if got := res.Rounds[3].Round; got != 3 {
		t.Errorf("final vote round = %d, want 3", got)
	}
	wantMerge := []AppliedMerge{{SourceClaimID: "p3:0:0", TargetClaimID: "p2:0:0", ParticipantIDs: []string{"p3"}}}
	if !reflect.DeepEqual(res.Rounds[1].AppliedMerges, wantMerge) {
		t.Errorf("round 1 merges = %+v", res.Rounds[1].AppliedMerges)
	}
	if got := res.FinalClaims[1].ProposedBy; !reflect.DeepEqual(got, []string{"p2", "p3"}) {
		t.Errorf("p2:0:0 proposedBy = %v", got)
	}
	wantRes := map[string][4]any{
		"p1:0:0": {2, 1, 3, "unresolved"},
		"p2:0:0": {3, 0, 3, "resolved"},
	}
	if len(res.ClaimResolutions) != 2 {
		t.Fatalf("resolutions = %+v", res.ClaimResolutions)
	}
	for _, r := range res.ClaimResolutions {
		w := wantRes[r.ClaimID]
		if r.AcceptCount != w[0] || r.RejectCount != w[1] || r.TotalVoters != w[2] || r.Status != w[3] {
			t.Errorf("resolution %s = %+v, want %v", r.ClaimID, r, w)
		}
	}
	wantScores := map[string][]float64{
		"p1": {68.33, 85.33, 85.33, 86.08, 81.27},
		"p2": {75.00, 89.00, 92.00, 89.75, 86.44},
		"p3": {80.00, 95.50, 97.00, 97.75, 92.56},
	}
	wantCorrectness := map[string]float64{"p1": 66.67, "p2": 85.71, "p3": 100}
	for i, ps := range res.Scoreboard {
		if want := []string{"p3", "p2", "p1"}[i]; ps.ParticipantID != want {
			t.Errorf("scoreboard[%d] = %s, want %s", i, ps.ParticipantID, want)
		}
		w := wantScores[ps.ParticipantID]
		for k, rs := range ps.ByRound {
			if rs.Round != k || rs.Score != w[k] {
				t.Errorf("%s round %d score = %v, want %v", ps.ParticipantID, rs.Round, rs.Score, w[k])
			}
		}
		if ps.Total != w[4] {
			t.Errorf("%s total = %v, want %v", ps.ParticipantID, ps.Total, w[4])
		}
		if ps.Breakdown.Correctness != wantCorrectness[ps.ParticipantID] {
			t.Errorf("%s correctness = %v, want %v", ps.ParticipantID, ps.Breakdown.Correctness, wantCorrectness[ps.ParticipantID])
		}
	}
	if r := res.Representative; r.ParticipantID != "p3" || r.Reason != "top-score" || r.Score != 92.56 {
		t.Errorf("representative = %+v", r)
	}
	if res.Task.Title != "Title by p3" {
		t.Errorf("title = %q", res.Task.Title)
	}
	wantDis := []Disagreement{{ClaimID: "p1:0:0", ParticipantID: "p2", Reason: "because p1:0:0"},
		{ClaimID: "p1:0:0", ParticipantID: "p2", Reason: "because p1:0:0"}}
	if !reflect.DeepEqual(res.Disagreements, wantDis) {
		t.Errorf("disagreements = %+v", res.Disagreements)
	}
	// Threshold 0.6 resolves both claims.
	run6 := runScript(t, mustRequest(t, fmt.Sprintf(workedRequest, 0.6)), workedExample())
	if run6.Result.Status != StatusConsensus {
		t.Errorf("status at 0.6 = %s, want consensus", run6.Result.Status)
	}
}
