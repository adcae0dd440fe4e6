package consensus

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

const minimalRequest = `{"requestId":"r","task":"t","participants":[{"id":"a"},{"id":"b"}]}`

func TestParseRequest_Defaults(t *testing.T) {
	r := mustRequest(t, minimalRequest)
	want := &Request{RequestID: "r", Task: "t", Participants: []Participant{{ID: "a"}, {ID: "b"}},
		ParticipantsPolicy: ParticipantsPolicy{MinParticipants: 2, OnInsufficientParticipants: "interrupt"},
		RoundPolicy:        RoundPolicy{MinRounds: 2, MaxRounds: 3},
		SessionPolicy:      SessionPolicy{Mode: SessionModeSticky},
		PeerContextPolicy: PeerContextPolicy{PassMode: PassModeFullPreferred, MaxCharsPerPeerResponse: 6000,
			MaxPeersPerRound: 10, OverflowStrategy: "truncate-tail"},
		ScoringPolicy: ScoringPolicy{Enabled: true, RepresentativeSelection: "top-score",
			TieBreaker: "latest-round-score", Rubric: DefaultRubric()},
		ConsensusPolicy: ConsensusPolicy{Threshold: 1},
		ReportPolicy:    ReportPolicy{TraceLevel: "compact", Composer: "builtin"},
		WaitingPolicy:   WaitingPolicy{PerTaskTimeoutMs: 1_200_000, PerRoundTimeoutMs: 1_200_000},
	}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("normalised =\n%+v\nwant\n%+v", r, want)
	}
	// Normalisation is idempotent: the encoded request parses to itself.
	b, _ := json.Marshal(r)
	if again := mustRequest(t, string(b)); !reflect.DeepEqual(again, r) {
		t.Errorf("re-parse differs: %+v", again)
	}
}

func TestParseRequest_PartialBlocksAndOpenKeys(t *testing.T) {
	r := mustRequest(t, `{"requestId":"r","task":"t","extra":1,"participants":[{"id":"a","x":1,"role":"r"},{"id":"b"}],
	 "roundPolicy":{"maxRounds":5,"junk":true},"scoringPolicy":{"rubric":{"correctness":0.5,"other":2}},
	 "actionPolicy":{"prompt":"do"},"context":{"b":1,"a":[1,2.50]},"constraints":{"tokenBudgetHint":3}}`)
	if r.RoundPolicy != (RoundPolicy{MinRounds: 2, MaxRounds: 5}) {
		t.Errorf("roundPolicy = %+v", r.RoundPolicy)
	}
	if r.ScoringPolicy.Rubric.Correctness != 0.5 || r.ScoringPolicy.Rubric.Completeness != 0.25 {
		t.Errorf("rubric = %+v", r.ScoringPolicy.Rubric)
	}
	if r.ActionPolicy == nil || !r.ActionPolicy.IncludeFullResult {
		t.Errorf("actionPolicy = %+v", r.ActionPolicy)
	}
	if string(r.Context) != `{"a":[1,2.50],"b":1}` {
		t.Errorf("context = %s", r.Context)
	}
	if r.Participants[0].Role == nil || *r.Participants[0].Role != "r" || r.Participants[1].Role != nil {
		t.Errorf("participants = %+v", r.Participants)
	}
}

func TestParseRequest_Errors(t *testing.T) {
	tests := []struct {
		name, patch string // patch is merged into minimalRequest's object
		wantPath    string
	}{
		{"missing requestId", `{"requestId":null}`, "requestId"},
		{"empty task", `{"task":""}`, "task"},
		{"one participant", `{"participants":[{"id":"a"}]}`, "participants"},
		{"participant id missing", `{"participants":[{"id":"a"},{"role":"x"}]}`, "participants[1].id"},
		{"duplicate participant", `{"participants":[{"id":"a"},{"id":"a"}]}`, "participants[1].id"},
		{"maxRounds below minRounds", `{"roundPolicy":{"minRounds":3,"maxRounds":2}}`, "roundPolicy.maxRounds"},
		{"maxRounds zero", `{"roundPolicy":{"minRounds":0,"maxRounds":0}}`, "roundPolicy.maxRounds"},
		{"minRounds fraction", `{"roundPolicy":{"minRounds":1.5}}`, "roundPolicy.minRounds"},
		{"minRounds negative", `{"roundPolicy":{"minRounds":-1}}`, "roundPolicy.minRounds"},
		{"minParticipants 1", `{"participantsPolicy":{"minParticipants":1}}`, "participantsPolicy.minParticipants"},
		{"too few for min", `{"participantsPolicy":{"minParticipants":3}}`, "participants"},
		{"bad onInsufficient", `{"participantsPolicy":{"onInsufficientParticipants":"wait"}}`, "participantsPolicy.onInsufficientParticipants"},
		{"session mode", `{"sessionPolicy":{"mode":"shared"}}`, "sessionPolicy.mode"},
		{"empty prefix", `{"sessionPolicy":{"sessionKeyPrefix":""}}`, "sessionPolicy.sessionKeyPrefix"},
		{"passMode", `{"peerContextPolicy":{"passMode":"summary"}}`, "peerContextPolicy.passMode"},
		{"maxChars small", `{"peerContextPolicy":{"maxCharsPerPeerResponse":199}}`, "peerContextPolicy.maxCharsPerPeerResponse"},
		{"maxPeers zero", `{"peerContextPolicy":{"maxPeersPerRound":0}}`, "peerContextPolicy.maxPeersPerRound"},
		{"overflow", `{"peerContextPolicy":{"overflowStrategy":"drop"}}`, "peerContextPolicy.overflowStrategy"},
		{"scoring off", `{"scoringPolicy":{"enabled":false}}`, "scoringPolicy.enabled"},
		{"selection", `{"scoringPolicy":{"representativeSelection":"vote"}}`, "scoringPolicy.representativeSelection"},
		{"tieBreaker", `{"scoringPolicy":{"tieBreaker":"random"}}`, "scoringPolicy.tieBreaker"},
		{"rubric range", `{"scoringPolicy":{"rubric":{"consistency":1.5}}}`, "scoringPolicy.rubric.consistency"},
		{"rubric type", `{"scoringPolicy":{"rubric":{"correctness":"high"}}}`, "scoringPolicy.rubric.correctness"},
		{"threshold range", `{"consensusPolicy":{"threshold":-0.1}}`, "consensusPolicy.threshold"},
		{"report closed", `{"reportPolicy":{"maxReportChars":100}}`, "reportPolicy.maxReportChars"},
		{"trace level", `{"reportPolicy":{"traceLevel":"verbose"}}`, "reportPolicy.traceLevel"},
		{"composer", `{"reportPolicy":{"composer":"llm"}}`, "reportPolicy.composer"},
		{"empty representativeId", `{"reportPolicy":{"representativeId":""}}`, "reportPolicy.representativeId"},
		{"trace bool", `{"reportPolicy":{"includeDeliberationTrace":"yes"}}`, "reportPolicy.includeDeliberationTrace"},
		{"waiting closed mode", `{"waitingPolicy":{"mode":"all"}}`, "waitingPolicy.mode"},
		{"waiting lateArrival", `{"waitingPolicy":{"lateArrivalPolicy":"drop"}}`, "waitingPolicy.lateArrivalPolicy"},
		{"perTask small", `{"waitingPolicy":{"perTaskTimeoutMs":999}}`, "waitingPolicy.perTaskTimeoutMs"},
		{"perRound small", `{"waitingPolicy":{"perRoundTimeoutMs":10}}`, "waitingPolicy.perRoundTimeoutMs"},
		{"deadline small", `{"waitingPolicy":{"globalDeadlineMs":5}}`, "waitingPolicy.globalDeadlineMs"},
		{"deadline huge", `{"waitingPolicy":{"globalDeadlineMs":1e300}}`, "waitingPolicy.globalDeadlineMs"},
		{"action closed", `{"actionPolicy":{"prompt":"p","when":"always"}}`, "actionPolicy.when"},
		{"action prompt", `{"actionPolicy":{}}`, "actionPolicy.prompt"},
		{"action actor empty", `{"actionPolicy":{"prompt":"p","actorId":""}}`, "actionPolicy.actorId"},
		{"prompt template empty", `{"promptPolicy":{"debateTemplate":""}}`, "promptPolicy.debateTemplate"},
		{"language empty", `{"constraints":{"language":""}}`, "constraints.language"},
		{"token hint zero", `{"constraints":{"tokenBudgetHint":0}}`, "constraints.tokenBudgetHint"},
		{"context array", `{"context":[1]}`, "context"},
		{"policy not object", `{"roundPolicy":3}`, "roundPolicy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var base, patch map[string]any
			_ = json.Unmarshal([]byte(minimalRequest), &base)
			if err := json.Unmarshal([]byte(tt.patch), &patch); err != nil {
				t.Fatal(err)
			}
			for k, val := range patch {
				if val == nil {
					delete(base, k)
				} else {
					base[k] = val
				}
			}
			raw, _ := json.Marshal(base)
			r, err := ParseRequest(raw)
			if r != nil || err == nil {
				t.Fatalf("accepted %s", raw)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %T %v is not a *ValidationError", err, err)
			}
			found := false
			for _, fe := range ve.Errors {
				found = found || fe.Path == tt.wantPath
			}
			if !found {
				t.Errorf("errors %+v lack path %q", ve.Errors, tt.wantPath)
			}
		})
	}
}

func TestParseRequest_Malformed(t *testing.T) {
	for _, raw := range []string{``, `[]`, `{`, `{"requestId":"r"} x`, "{\"task\":\"\xff\"}", `null`} {
		if _, err := ParseRequest([]byte(raw)); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("ParseRequest(%q) = %v, want invalid request", raw, err)
		}
	}
	big := `{"task":"` + strings.Repeat("a", MaxRequestBytes) + `"}`
	if _, err := ParseRequest([]byte(big)); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("oversized request accepted")
	}
}

func TestStep_InvalidStartCreatesNothing(t *testing.T) {
	r := mustRequest(t, minimalRequest)
	r.Participants = append(r.Participants, Participant{ID: "a"})
	s, fx, err := step(nil, Start(1, "sid", r))
	if s != nil || fx != nil || !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("Step = %v, %v, %v", s, fx, err)
	}
	if _, _, err := step(nil, Start(1, "", mustRequest(t, minimalRequest))); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("empty session id accepted: %v", err)
	}
}
