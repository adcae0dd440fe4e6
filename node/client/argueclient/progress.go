package argueclient

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/concordmap/concord/consensus"
)

// Progress renders a run's events as one readable line each. Colour is
// used only when the output is a terminal (and NO_COLOR is unset), so
// redirected output carries no ANSI escape codes. Safe for concurrent
// use: a Follower renders events while mapclient's reconnect hook prints.
type Progress struct {
	mu    sync.Mutex // one line at a time into w
	w     io.Writer
	color bool
	// SummaryChars caps the participant summary quoted per response.
	SummaryChars int
}

// NewProgress returns a renderer writing to w; colour is auto-detected.
func NewProgress(w io.Writer) *Progress {
	return &Progress{w: w, color: isTerminal(w), SummaryChars: 100}
}

// isTerminal reports whether w is a character device that wants colour.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

const (
	ansiReset  = "\x1b[0m"
	ansiBold   = "\x1b[1m"
	ansiRed    = "\x1b[31m"
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
	ansiCyan   = "\x1b[36m"
)

func (p *Progress) paint(code, s string) string {
	if !p.color {
		return s
	}
	return code + s + ansiReset
}

// Event writes the line of one event. Payload may be the engine's typed
// payload or raw JSON (as it arrives from a server).
func (p *Progress) Event(ev consensus.Event) {
	line := p.line(ev.Type, typedPayload(ev.Type, ev.Payload))
	if line == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%s %s\n", clock(ev.At), line)
}

// Printf writes a free-form line (connection notices and the like).
func (p *Progress) Printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
}

// clock renders an event's ISO time as local HH:MM:SS, or the raw text.
func clock(at string) string {
	if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
		return t.Local().Format("15:04:05")
	}
	return at
}

func round(phase consensus.Phase, r int) string {
	if phase == consensus.PhaseInitial || phase == consensus.PhaseFinalVote {
		return fmt.Sprintf("round %d (%s)", r, phase)
	}
	return fmt.Sprintf("round %d", r)
}

func (p *Progress) line(typ string, payload any) string {
	switch pl := payload.(type) {
	case *consensus.SessionStartedPayload:
		return fmt.Sprintf("session started: %d participants (%s), at least %d must stay active",
			len(pl.Participants), strings.Join(pl.Participants, ", "), pl.MinParticipants)
	case *consensus.RoundDispatchedPayload:
		return p.paint(ansiBold, fmt.Sprintf("%s: dispatched to %s", round(pl.Phase, pl.Round), strings.Join(pl.Participants, ", ")))
	case *consensus.ParticipantRespondedPayload:
		return fmt.Sprintf("  %s responded: %s; %d judgements (%d agree, %d disagree, %d revise), %s: %s",
			p.paint(ansiCyan, pl.ParticipantID), plural(pl.ExtractedClaims, "new claim"), pl.Judgements,
			pl.StanceAgree, pl.StanceDisagree, pl.StanceRevise, votes(pl), quote(pl.Summary, p.SummaryChars))
	case *consensus.ParticipantEliminatedPayload:
		msg := fmt.Sprintf("  %s eliminated in %s: %s", pl.ParticipantID, round(pl.Phase, pl.Round), pl.Reason)
		if pl.Error != "" {
			msg += " (" + oneLine(pl.Error, 160) + ")"
		}
		return p.paint(ansiRed, msg)
	case *consensus.ClaimsMergedPayload:
		return fmt.Sprintf("  merged claim %s into %s", pl.SourceClaimID, pl.MergedInto)
	case *consensus.RoundCompletedPayload:
		return fmt.Sprintf("%s complete: %d answered, %d timed out, %d failed; %s in catalog (%d new, %d merged); active: %s",
			round(pl.Phase, pl.Round), pl.Completed, pl.TimedOut, pl.Failed, plural(pl.ClaimCatalogSize, "claim"),
			pl.NewClaims, pl.MergeCount, strings.Join(pl.ActiveParticipants, ", "))
	case *consensus.EarlyStopPayload:
		return p.paint(ansiYellow, fmt.Sprintf("early stop after round %d: %s", pl.Round, pl.Reason))
	case *consensus.GlobalDeadlinePayload:
		return p.paint(ansiYellow, fmt.Sprintf("global deadline (%d ms) hit in round %d", pl.GlobalDeadlineMs, pl.Round))
	case *consensus.ConsensusDraftedPayload:
		return fmt.Sprintf("consensus drafted: %d of %s resolved", pl.ResolvedCount, plural(pl.ClaimCount, "claim"))
	case *consensus.SessionInterruptedPayload:
		return p.paint(ansiYellow, fmt.Sprintf("session interrupted: %s; active: %s", pl.Reason, strings.Join(pl.ActiveParticipants, ", ")))
	case *consensus.ReportDispatchedPayload:
		return fmt.Sprintf("report requested from %s (%s composer)", pl.ReporterID, pl.Composer)
	case *consensus.ReportCompletedPayload:
		msg := fmt.Sprintf("report completed by %s (%s)", pl.ReporterID, pl.Mode)
		if pl.Reason != "" {
			msg += ": " + pl.Reason
		}
		return msg
	case *consensus.ActionDispatchedPayload:
		return fmt.Sprintf("action requested from %s: %s", pl.ActorID, quote(pl.Prompt, p.SummaryChars))
	case *consensus.ActionCompletedPayload:
		return fmt.Sprintf("action completed by %s: %s", pl.ActorID, quote(pl.Summary, p.SummaryChars))
	case *consensus.ActionFailedPayload:
		return p.paint(ansiRed, fmt.Sprintf("action by %s failed: %s", pl.ActorID, pl.Reason))
	case *consensus.FinalizedPayload:
		col := ansiGreen
		if pl.Status != consensus.StatusConsensus {
			col = ansiYellow
		}
		return p.paint(col, fmt.Sprintf("finished: status %s, representative %s", pl.Status, orNone(pl.Representative)))
	case *consensus.FailedPayload:
		return p.paint(ansiRed, fmt.Sprintf("failed: %s: %s", pl.Code, pl.Message))
	}
	return typ
}

// typedPayload decodes a raw payload into the engine's payload type for
// its event type; typed payloads pass through.
func typedPayload(typ string, payload any) any {
	var raw []byte
	switch v := payload.(type) {
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	default:
		return payload
	}
	mk, ok := payloadTypes[typ]
	if !ok {
		return payload
	}
	out := mk()
	if json.Unmarshal(raw, out) != nil {
		return payload
	}
	return out
}

var payloadTypes = map[string]func() any{
	consensus.EventSessionStarted:        func() any { return new(consensus.SessionStartedPayload) },
	consensus.EventRoundDispatched:       func() any { return new(consensus.RoundDispatchedPayload) },
	consensus.EventParticipantResponded:  func() any { return new(consensus.ParticipantRespondedPayload) },
	consensus.EventParticipantEliminated: func() any { return new(consensus.ParticipantEliminatedPayload) },
	consensus.EventClaimsMerged:          func() any { return new(consensus.ClaimsMergedPayload) },
	consensus.EventRoundCompleted:        func() any { return new(consensus.RoundCompletedPayload) },
	consensus.EventEarlyStopTriggered:    func() any { return new(consensus.EarlyStopPayload) },
	consensus.EventGlobalDeadlineHit:     func() any { return new(consensus.GlobalDeadlinePayload) },
	consensus.EventConsensusDrafted:      func() any { return new(consensus.ConsensusDraftedPayload) },
	consensus.EventSessionInterrupted:    func() any { return new(consensus.SessionInterruptedPayload) },
	consensus.EventReportDispatched:      func() any { return new(consensus.ReportDispatchedPayload) },
	consensus.EventReportCompleted:       func() any { return new(consensus.ReportCompletedPayload) },
	consensus.EventActionDispatched:      func() any { return new(consensus.ActionDispatchedPayload) },
	consensus.EventActionCompleted:       func() any { return new(consensus.ActionCompletedPayload) },
	consensus.EventActionFailed:          func() any { return new(consensus.ActionFailedPayload) },
	consensus.EventFinalized:             func() any { return new(consensus.FinalizedPayload) },
	consensus.EventFailed:                func() any { return new(consensus.FailedPayload) },
}

// votes counts a final-vote response's votes by kind.
func votes(pl *consensus.ParticipantRespondedPayload) string {
	if pl.ClaimVotes == 0 {
		return "0 votes"
	}
	acc := 0
	for _, v := range pl.ClaimVotesDetail {
		if v.Vote == consensus.VoteAccept {
			acc++
		}
	}
	return fmt.Sprintf("%s (%d accept, %d reject)", plural(pl.ClaimVotes, "vote"), acc, len(pl.ClaimVotesDetail)-acc)
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// oneLine collapses whitespace and cuts s to n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func quote(s string, n int) string { return `"` + oneLine(s, n) + `"` }
