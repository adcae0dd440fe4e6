package consensus

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
)

// Every ParticipantResponded of the chaos runs (perturbed, escaped and
// odd answers) encodes to encoding/json's bytes.
func TestAppendJSON_MatchesEncodingJSON(t *testing.T) {
	req := mustRequest(t, `{"requestId":"r","task":"T","participants":[{"id":"a"},{"id":"b"},{"id":"c"}],"roundPolicy":{"minRounds":1,"maxRounds":3}}`)
	n := 0
	for seed := uint64(1); seed <= 60; seed++ {
		run, err := Simulate(context.Background(), req, chaosDir{seed}, SimOptions{SessionID: "p", StartMs: 5000})
		if err != nil {
			t.Fatal(err)
		}
		if run.Result != nil {
			want, _ := json.Marshal(run.Result.FinalClaims)
			if got := AppendClaimsJSON(nil, run.Result.FinalClaims); !bytes.Equal(got, want) {
				t.Fatalf("seed %d catalog:\n got %s\nwant %s", seed, got, want)
			}
		}
		for _, ev := range run.Events {
			p, ok := ev.Payload.(*ParticipantRespondedPayload)
			if !ok {
				continue
			}
			n++
			want, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.AppendJSON(nil); !bytes.Equal(got, want) {
				t.Fatalf("seed %d:\n got %s\nwant %s", seed, got, want)
			}
		}
	}
	if n < 100 {
		t.Fatalf("only %d payloads compared", n)
	}
}

func FuzzAppendJSON(f *testing.F) {
	f.Add("plain", "<é>\u2028\"\\\x00\xff", 0.5)
	f.Add("", "x", 1e-7)
	f.Add("a", "b", 0.0)
	f.Fuzz(func(t *testing.T, s1, s2 string, conf float64) {
		if conf != conf || conf > 1e300 || conf < -1e300 {
			return // engine confidences are validated numbers
		}
		p := &ParticipantRespondedPayload{Phase: Phase(s1), ParticipantID: s2, Summary: s1 + s2,
			ExtractedClaimsDetail: []ExtractedClaim{{Title: s1, Statement: s2, Category: s1}},
			JudgementsDetail:      []Judgement{{ClaimID: s2, Stance: s1, Confidence: conf, Rationale: s2, MergesWith: &s1}},
			ClaimVotesDetail:      []VoteInput{{ClaimID: s1, Vote: s2, Reason: &s2}}}
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
		claims := []Claim{{ClaimID: s1, Title: s2, Statement: s1, Category: s2, ProposedBy: []string{s1, s2},
			Status: s2, MergedInto: s1}, {ProposedBy: []string{}}, {}}
		want, _ = json.Marshal(claims)
		if got := AppendClaimsJSON(nil, claims); !bytes.Equal(got, want) {
			t.Fatalf("claims\n got %s\nwant %s", got, want)
		}
	})
}
