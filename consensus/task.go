package consensus

import (
	"encoding/json"
	"strconv"
	"strings"
)

// TaskKind is the kind of a task sent to an agent.
type TaskKind string

// Task kinds.
const (
	TaskRound  TaskKind = "round"
	TaskReport TaskKind = "report"
	TaskAction TaskKind = "action"
)

// Task is one unit of work for an agent (spec §7, §15, §17). ID (the
// correlation id a transport should carry), ParticipantID and TimeoutAt
// route it; MarshalJSON renders argue's task shape for its Kind. Tasks share
// immutable data with the state: never modify one.
type Task struct {
	ID            string
	Kind          TaskKind
	ParticipantID string
	// TimeoutAt is the absolute time (ms) the engine stops waiting.
	TimeoutAt int64
	Phase     Phase // round tasks
	Round     int   // round tasks

	SessionID       string
	RequestID       string
	Prompt          string
	PeerRoundInputs []PeerInput
	ClaimCatalog    []Claim
	RoundMetadata   *RoundMetadata
	ReportInput     *ReportInput
	ReportMetadata  *ReportMetadata
	ArgueResult     *ActionArgueResult
	FullResult      *Result
}

// PeerInput is a peer's previous response as shown to a participant.
type PeerInput struct {
	ParticipantID string `json:"participantId"`
	Round         int    `json:"round"`
	FullResponse  string `json:"fullResponse"`
	Truncated     bool   `json:"truncated,omitempty"`
}

// OutputSchema names the expected output content.
type OutputSchema struct {
	Ref        string          `json:"ref"`
	JSONSchema json.RawMessage `json:"jsonSchema"`
}

// RoundMetadata is a round task's metadata block.
type RoundMetadata struct {
	ParticipantSessionKey string          `json:"participantSessionKey"`
	Role                  *string         `json:"role,omitempty"`
	PeerContextPassMode   string          `json:"peerContextPassMode"`
	Constraints           *Constraints    `json:"constraints,omitempty"`
	Context               json.RawMessage `json:"context,omitempty"`
	OutputSchema          OutputSchema    `json:"outputSchema"`
}

// ReportRepresentative is the representative as given to a reporter.
type ReportRepresentative struct {
	ParticipantID string  `json:"participantId"`
	Speech        string  `json:"speech"`
	Score         float64 `json:"score"`
}

// ReportInput is the material of a report task.
type ReportInput struct {
	Status           string               `json:"status"`
	Representative   ReportRepresentative `json:"representative"`
	FinalClaims      []Claim              `json:"finalClaims"`
	ClaimResolutions []ClaimResolution    `json:"claimResolutions"`
	Scoreboard       []ParticipantScore   `json:"scoreboard"`
	Rounds           []RoundRecord        `json:"rounds"`
}

// ReportMetadata is a report task's metadata block.
type ReportMetadata struct {
	SeparateSession             bool            `json:"separateSession"`
	ReporterIsActiveParticipant bool            `json:"reporterIsActiveParticipant"`
	RequestedRepresentativeID   string          `json:"requestedRepresentativeId,omitempty"`
	Constraints                 *Constraints    `json:"constraints,omitempty"`
	Context                     json.RawMessage `json:"context,omitempty"`
	OutputSchema                OutputSchema    `json:"outputSchema"`
}

// ActionArgueResult is the debate outcome given to an actor.
type ActionArgueResult struct {
	Status               string             `json:"status"`
	FinalSummary         string             `json:"finalSummary"`
	RepresentativeSpeech string             `json:"representativeSpeech"`
	Claims               []Claim            `json:"claims"`
	ClaimResolutions     []ClaimResolution  `json:"claimResolutions"`
	Scoreboard           []ParticipantScore `json:"scoreboard"`
	Disagreements        []Disagreement     `json:"disagreements"`
}

type roundTaskJSON struct {
	Kind            TaskKind        `json:"kind"`
	SessionID       string          `json:"sessionId"`
	RequestID       string          `json:"requestId"`
	ParticipantID   string          `json:"participantId"`
	Phase           Phase           `json:"phase"`
	Round           int             `json:"round"`
	Prompt          string          `json:"prompt"`
	SelfHistoryRef  map[string]bool `json:"selfHistoryRef"`
	PeerRoundInputs []PeerInput     `json:"peerRoundInputs"`
	ClaimCatalog    []Claim         `json:"claimCatalog"`
	Metadata        *RoundMetadata  `json:"metadata"`
}

type reportTaskJSON struct {
	Kind          TaskKind        `json:"kind"`
	SessionID     string          `json:"sessionId"`
	RequestID     string          `json:"requestId"`
	ParticipantID string          `json:"participantId"`
	Prompt        string          `json:"prompt"`
	ReportInput   *ReportInput    `json:"reportInput"`
	Metadata      *ReportMetadata `json:"metadata"`
}

type actionTaskJSON struct {
	Kind          TaskKind           `json:"kind"`
	SessionID     string             `json:"sessionId"`
	RequestID     string             `json:"requestId"`
	ParticipantID string             `json:"participantId"`
	Prompt        string             `json:"prompt"`
	ArgueResult   *ActionArgueResult `json:"argueResult"`
	FullResult    *Result            `json:"fullResult,omitempty"`
}

// MarshalJSON renders the task in argue's shape for its kind.
func (t *Task) MarshalJSON() ([]byte, error) {
	switch t.Kind {
	case TaskReport:
		return json.Marshal(reportTaskJSON{Kind: t.Kind, SessionID: t.SessionID, RequestID: t.RequestID,
			ParticipantID: t.ParticipantID, Prompt: t.Prompt, ReportInput: t.ReportInput, Metadata: t.ReportMetadata})
	case TaskAction:
		return json.Marshal(actionTaskJSON{Kind: t.Kind, SessionID: t.SessionID, RequestID: t.RequestID,
			ParticipantID: t.ParticipantID, Prompt: t.Prompt, ArgueResult: t.ArgueResult, FullResult: t.FullResult})
	}
	return json.Marshal(roundTaskJSON{Kind: t.Kind, SessionID: t.SessionID, RequestID: t.RequestID,
		ParticipantID: t.ParticipantID, Phase: t.Phase, Round: t.Round, Prompt: t.Prompt,
		SelfHistoryRef: map[string]bool{"stickySession": true}, PeerRoundInputs: t.PeerRoundInputs,
		ClaimCatalog: t.ClaimCatalog, Metadata: t.RoundMetadata})
}

// taskCatalog is the catalog sent with a round task: all of it for the
// initial round, only active claims afterwards (§7.1). While no claim is
// merged that is the catalog itself, shared copy-on-write (sharedCatalog);
// otherwise a filtered copy. Either is shared by every task of the round,
// and by the tasks of later rounds while the catalog does not change
// (debate rounds that only agree, the final vote); it is never modified.
func (s *State) taskCatalog(phase Phase) []Claim {
	k := 1
	if phase == PhaseInitial {
		k = 0
	}
	if c := s.taskCatalogs[k]; c != nil {
		return c
	}
	active := 0
	for i := range s.catalog {
		if s.catalog[i].Status == ClaimActive {
			active++
		}
	}
	var out []Claim
	if phase == PhaseInitial || active == len(s.catalog) {
		out = s.sharedCatalog()
	} else {
		out = make([]Claim, 0, active)
		for i := range s.catalog {
			if s.catalog[i].Status == ClaimActive {
				out = append(out, s.catalog[i])
			}
		}
	}
	s.taskCatalogs[k] = out
	return out
}

// peerTexts returns the previous successful round's outputs, cut to the
// peer-context budget, in dispatch order.
func (s *State) peerTexts() []PeerInput {
	if s.prevRound < 0 {
		return nil
	}
	pc := s.req.PeerContextPolicy
	outs := s.rounds[s.prevRound].Outputs
	peers := make([]PeerInput, len(outs))
	for i, o := range outs {
		text, cut := truncateTail(o.FullResponse, int(pc.MaxCharsPerPeerResponse))
		if pc.OverflowStrategy == OverflowTruncateMiddle {
			text, cut = truncateMiddle(o.FullResponse, int(pc.MaxCharsPerPeerResponse))
		}
		peers[i] = PeerInput{ParticipantID: o.ParticipantID, Round: o.Round, FullResponse: text, Truncated: cut}
	}
	return peers
}

// roundSchemaRef names a phase's output schema; the known phases' names are
// constants.
func roundSchemaRef(phase Phase) string {
	switch phase {
	case PhaseInitial:
		return "argue.round.initial.output-content.v1"
	case PhaseDebate:
		return "argue.round.debate.output-content.v1"
	case PhaseFinalVote:
		return "argue.round.final_vote.output-content.v1"
	}
	return "argue.round." + string(phase) + ".output-content.v1"
}

// roundTaskMem is the memory of one round task; a round allocates all of
// them in one block.
type roundTaskMem struct {
	task Task
	md   RoundMetadata
}

// pendingRoundTasks builds the tasks of the current round's pending slots,
// in dispatch order. What they share (catalog, peer texts, prompt, schema)
// is built once per call, and their memory is allocated in blocks.
func (s *State) pendingRoundTasks(cur *roundState) []*Task {
	n := 0
	for i := range cur.tasks {
		if cur.tasks[i].status == taskPending {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	req := s.req
	catalog := s.taskCatalog(cur.phase)
	peers := s.peerTexts()
	prompt := s.roundPrompt(cur.phase, cur.round)
	schema := OutputSchema{Ref: roundSchemaRef(cur.phase), JSONSchema: roundSchemas[cur.phase]}
	maxPeers := int(min(int64(len(peers)), req.PeerContextPolicy.MaxPeersPerRound))
	peerBlock := make([]PeerInput, 0, n*max(maxPeers, 0))
	mem := make([]roundTaskMem, n)
	out := make([]*Task, 0, n)
	keyPrefix := req.sessionKeyPrefix() + ":" + s.sessionID + ":"
	for i := range cur.tasks {
		t := &cur.tasks[i]
		if t.status != taskPending {
			continue
		}
		start := len(peerBlock)
		for _, p := range peers {
			if p.ParticipantID != t.pid && int64(len(peerBlock)-start) < req.PeerContextPolicy.MaxPeersPerRound {
				peerBlock = append(peerBlock, p)
			}
		}
		// Field by field into the zeroed block: assigning composite
		// literals copies them with a bulk barrier while the collector
		// marks; fields a round task leaves empty stay zero.
		m := &mem[len(out)]
		md := &m.md
		md.ParticipantSessionKey = keyPrefix + t.pid
		md.PeerContextPassMode, md.Constraints, md.Context = req.PeerContextPolicy.PassMode, req.Constraints, req.Context
		md.OutputSchema.Ref, md.OutputSchema.JSONSchema = schema.Ref, schema.JSONSchema
		if pi := req.participantIndex(t.pid); pi >= 0 {
			md.Role = req.Participants[pi].Role
		}
		k := &m.task
		k.ID, k.Kind, k.ParticipantID, k.TimeoutAt, k.Phase, k.Round = t.id, TaskRound, t.pid, t.due, cur.phase, cur.round
		k.SessionID, k.RequestID, k.Prompt = s.sessionID, req.RequestID, prompt
		k.PeerRoundInputs, k.ClaimCatalog, k.RoundMetadata = peerBlock[start:len(peerBlock):len(peerBlock)], catalog, md
		out = append(out, k)
	}
	return out
}

func (s *State) buildReportTask(t *pendingTask) *Task {
	req := s.req
	v := s.view()
	rep := v.rep
	return &Task{ID: t.id, Kind: TaskReport, ParticipantID: t.pid, TimeoutAt: t.due,
		SessionID: req.sessionKeyPrefix() + ":" + s.sessionID + ":report:" + t.pid, RequestID: req.RequestID,
		Prompt: s.reportPrompt(),
		ReportInput: &ReportInput{Status: v.status,
			Representative: ReportRepresentative{ParticipantID: rep.ParticipantID, Speech: rep.Speech, Score: rep.Score},
			FinalClaims:    s.sharedCatalog(), ClaimResolutions: v.resolutions, Scoreboard: v.scoreboard,
			Rounds: append([]RoundRecord{}, s.rounds...)},
		ReportMetadata: &ReportMetadata{SeparateSession: true, ReporterIsActiveParticipant: s.isActive(t.pid),
			RequestedRepresentativeID: req.ReportPolicy.RepresentativeID, Constraints: req.Constraints,
			Context: req.Context, OutputSchema: OutputSchema{Ref: "argue.report.output-content.v1", JSONSchema: reportSchema}}}
}

func (s *State) buildActionTask(t *pendingTask) *Task {
	req := s.req
	res := s.baseResult()
	task := &Task{ID: t.id, Kind: TaskAction, ParticipantID: t.pid, TimeoutAt: t.due,
		SessionID: req.sessionKeyPrefix() + ":" + s.sessionID + ":action:" + t.pid, RequestID: req.RequestID,
		Prompt: req.ActionPolicy.Prompt,
		ArgueResult: &ActionArgueResult{Status: res.Status, FinalSummary: res.Report.FinalSummary,
			RepresentativeSpeech: res.Report.RepresentativeSpeech, Claims: res.FinalClaims,
			ClaimResolutions: res.ClaimResolutions, Scoreboard: res.Scoreboard, Disagreements: res.Disagreements}}
	if req.ActionPolicy.IncludeFullResult {
		task.FullResult = res // built fresh for this task: nobody else holds it
	}
	return task
}

// Fixed parts of the round prompt, by line.
const (
	roundPromptHead = "You take part in a structured multi-agent debate run by a consensus engine.\n" +
		`Answer with exactly one JSON object: {"kind":"round","output":{...}} where output follows metadata.outputSchema. No markdown fences.` + "\n"
	roundPromptInitial = "Goal: give your own analysis, a short taskTitle (at most 60 characters) and the concrete claims you want debated.\n" +
		"Required: fullResponse, summary, taskTitle, judgements (may be empty). Optional: extractedClaims [{title, statement, category?}].\n" +
		"Do not assign claim ids and do not send claimVotes."
	roundPromptDebate = "Goal: judge the claims in claimCatalog in the light of peerRoundInputs; revise, object, or merge duplicates (the older claim survives).\n" +
		"Required: fullResponse, summary, judgements [{claimId, stance: agree|disagree|revise, confidence 0..1, rationale, revisedStatement?, mergesWith?}].\n" +
		"Optional: extractedClaims for genuinely new points. Do not send claimVotes."
	roundPromptFinalVote = "Goal: vote on every claim in claimCatalog, once each.\n" +
		"Required: fullResponse, summary, judgements (may be empty), claimVotes [{claimId, vote: accept|reject, reason?}] with at least one vote."
)

// roundPrompt is the built-in round prompt (our wording; argue's contract is
// the fields it states, not the text). It is written into one buffer of
// its final size: the lines are fixed text around a few values.
func (s *State) roundPrompt(phase Phase, round int) string {
	req := s.req
	if phase == PhaseDebate && req.PromptPolicy != nil && req.PromptPolicy.DebateTemplate != "" {
		return req.PromptPolicy.DebateTemplate
	}
	tail := roundPromptFinalVote
	switch phase {
	case PhaseInitial:
		tail = roundPromptInitial
	case PhaseDebate:
		tail = roundPromptDebate
	}
	var num [20]byte
	rs := strconv.AppendInt(num[:0], int64(round), 10)
	var lang, budget string
	if c := req.Constraints; c != nil {
		lang = c.Language
		if c.TokenBudgetHint != nil {
			budget = strconv.FormatInt(*c.TokenBudgetHint, 10)
		}
	}
	var b strings.Builder
	b.Grow(len(roundPromptHead) + len("phase=\nround=\ntask=") + len(phase) + len(rs) + len(req.Task) +
		len("\nlanguage=") + len(lang) + len("\ntoken_budget_hint=") + len(budget) + len("\n\n") + len(tail))
	b.WriteString(roundPromptHead)
	b.WriteString("phase=")
	b.WriteString(string(phase))
	b.WriteString("\nround=")
	b.Write(rs)
	b.WriteString("\ntask=")
	b.WriteString(req.Task)
	if lang != "" {
		b.WriteString("\nlanguage=")
		b.WriteString(lang)
	}
	if budget != "" {
		b.WriteString("\ntoken_budget_hint=")
		b.WriteString(budget)
	}
	b.WriteString("\n\n")
	b.WriteString(tail)
	return b.String()
}

func (s *State) reportPrompt() string {
	req := s.req
	if req.PromptPolicy != nil && req.PromptPolicy.ReportTemplate != "" {
		return req.PromptPolicy.ReportTemplate
	}
	trace := "off"
	if req.ReportPolicy.IncludeDeliberationTrace {
		trace = "on"
	}
	lines := []string{
		"You write the final report of a finished multi-agent debate from reportInput.",
		`Answer with exactly one JSON object: {"kind":"report","output":{...}} where output follows metadata.outputSchema. No markdown fences.`,
		"Required: mode, traceIncluded, traceLevel, finalSummary (the conclusion), representativeSpeech (the spokesperson's statement).",
		"Optional: opinionShiftTimeline, roundHighlights.",
		"trace=" + trace, "traceLevel=" + req.ReportPolicy.TraceLevel,
	}
	if req.Constraints != nil && req.Constraints.Language != "" {
		lines = append(lines, "language="+req.Constraints.Language)
	}
	return strings.Join(lines, "\n")
}
