package consensus

import (
	"errors"
	"fmt"
)

// RoundResult is an agent's answer to a round task, parsed and checked
// against the output schema once, where the answer arrives (the edge),
// without knowing which task it answers. Apply finishes the check against
// the task (participant, phase, round): the task binding of §22.1, the
// phase rules (taskTitle in the initial round, claimVotes only in the final
// vote), and then keeps the output. A result no task could accept is still
// a RoundResult: Apply turns it into a failed task with the same message
// the raw JSON would have produced, so validating at the edge changes no
// outcome, event or error text.
//
// Why the split: parsing is most of the cost of a result (a 200-vote final
// vote is ~14 KB of JSON) and the edge can do it before the answer enters
// the Raft log, once, instead of every replica doing it in Apply. The log
// then carries MarshalBinary's compact form (DESIGN.md §5).
//
// A RoundResult is immutable once built; Apply copies what it keeps, so one
// value may be fed to several states.
type RoundResult struct {
	// fatal is the complete error of a result that no task accepts (not
	// JSON, not UTF-8, too large, wrong kind, no output); nothing else is
	// set then.
	fatal string
	// The output's own participantId, phase and round, when present (decl
	// says which), compared with the task's by Apply.
	decl      uint8
	declPID   string
	declPhase string
	declRound float64
	// The first problem of each group of task-independent checks, in the
	// order the checks run (see check): fullResponse, summary, respondedAt,
	// selfScore; taskTitle (initial round only); claimVotes as a final vote
	// needs them; extractedClaims then judgements.
	fieldErr, titleErr, votesErr, listErr string
	// hasVotes: claimVotes was present (an error outside the final vote).
	hasVotes bool
	// out is the output without its task binding (ParticipantID, Phase,
	// Round, RespondedAt); set only when some task could accept it.
	out       Output
	selfScore float64 // out.SelfScore points here
}

// Bits of RoundResult.decl (persisted in the binary form: never renumber).
const (
	declPID uint8 = 1 << iota
	declPhase
	declRound
)

// ParseRoundResult parses an agent's raw round result (the envelope
// {"kind":"round","output":{...}}) and runs every schema check that does
// not depend on the task. It never fails: a malformed result yields a
// RoundResult that Apply turns into a failed task.
func ParseRoundResult(raw []byte) *RoundResult {
	if err := checkRaw(raw); err != nil {
		return &RoundResult{fatal: err.Error()}
	}
	d := getOutDecoder(raw)
	defer putOutDecoder(d)
	if !d.parse() {
		return &RoundResult{fatal: jsonError(raw).Error()}
	}
	return d.result()
}

func fatalResult(msg string) *RoundResult {
	return &RoundResult{fatal: invalidResult + ": " + msg}
}

// Err returns the error of a result that no task can accept, or nil. A
// nil Err does not mean the result is valid: that depends on its task.
func (r *RoundResult) Err() error {
	if r.fatal == "" {
		return nil
	}
	return errors.New(r.fatal)
}

// usable reports whether some task could accept the result.
func (r *RoundResult) usable() bool {
	return r.fatal == "" && r.fieldErr == "" && r.listErr == "" && (!r.hasVotes || r.votesErr == "")
}

// check runs the task-dependent checks in the reference decoder's order,
// interleaved with the groups recorded at parse time, and returns the
// first problem or "".
func (r *RoundResult) check(pid string, phase Phase, round int) string {
	if r.decl&declPID != 0 && r.declPID != pid {
		return fmt.Sprintf("output.participantId %q does not match the task's participant %q", r.declPID, pid)
	}
	if r.decl&declPhase != 0 && Phase(r.declPhase) != phase {
		return fmt.Sprintf("output.phase %q does not match the task's phase %q", r.declPhase, phase)
	}
	if r.decl&declRound != 0 && r.declRound != float64(round) {
		return fmt.Sprintf("output.round %v does not match the task's round %d", r.declRound, round)
	}
	if r.fieldErr != "" {
		return r.fieldErr
	}
	switch phase {
	case PhaseInitial, PhaseDebate:
		if phase == PhaseInitial && r.titleErr != "" {
			return r.titleErr
		}
		if r.hasVotes {
			return fmt.Sprintf("output.claimVotes must be absent in the %s phase", phase)
		}
	default:
		if r.votesErr != "" {
			return r.votesErr
		}
	}
	return r.listErr
}

// bind checks the result against its task and returns the output bound to
// it. The output is a new value (the result stays untouched) sharing the
// result's immutable lists and strings.
func (r *RoundResult) bind(pid string, phase Phase, round int) (*Output, error) {
	if r.fatal != "" {
		return nil, errors.New(r.fatal)
	}
	if m := r.check(pid, phase, round); m != "" {
		return nil, errors.New(invalidResult + ": " + m)
	}
	o := new(Output)
	*o = r.out
	o.ParticipantID, o.Phase, o.Round = pid, phase, round
	if phase != PhaseInitial {
		o.TaskTitle = ""
	}
	if phase != PhaseFinalVote {
		o.ClaimVotes = nil
	}
	return o, nil
}

// decodeRoundOutput parses and validates an untrusted round result for the
// task (participant, phase, round). The output is bound to the dispatched
// task: a participantId, phase or round that disagrees is an error (§22.1).
// It never panics; every problem is returned as an error message.
func decodeRoundOutput(raw []byte, pid string, phase Phase, round int) (*Output, error) {
	return ParseRoundResult(raw).bind(pid, phase, round)
}
