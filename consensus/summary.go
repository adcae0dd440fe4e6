package consensus

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// WriteSummary writes a readable markdown summary of a result: title,
// status, representative, claims with resolutions and vote counts,
// scoreboard, eliminations, disagreements and the report summary.
func WriteSummary(w io.Writer, res *Result) {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", mdLine(res.Task.Title))
	fmt.Fprintf(&b, "- **Status:** %s\n", res.Status)
	fmt.Fprintf(&b, "- **Representative:** %s (%s, score %s)\n", res.Representative.ParticipantID,
		res.Representative.Reason, fmtScore(res.Representative.Score))
	m := res.Metrics
	fmt.Fprintf(&b, "- **Rounds:** %d (turns %d, timeouts %d, early stop %t, deadline hit %t)\n",
		m.TotalRounds, m.TotalTurns, m.WaitTimeouts, m.EarlyStopTriggered, m.GlobalDeadlineHit)
	fmt.Fprintf(&b, "- **Session:** `%s` (request `%s`)\n", res.SessionID, res.RequestID)
	if res.Error != nil {
		fmt.Fprintf(&b, "- **Interrupted:** %s\n", mdLine(res.Error.Message))
	}
	fmt.Fprintf(&b, "\n## Task\n\n%s\n", quote(res.Task.Prompt))
	writeClaims(&b, res)
	b.WriteString("\n## Scoreboard\n\n| # | Participant | Total | By round |\n|---|---|---|---|\n")
	for i, ps := range res.Scoreboard {
		rounds := make([]string, len(ps.ByRound))
		for k, r := range ps.ByRound {
			rounds[k] = fmt.Sprintf("r%d %s", r.Round, fmtScore(r.Score))
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s |\n", i+1, mdCell(ps.ParticipantID), fmtScore(ps.Total), strings.Join(rounds, ", "))
	}
	b.WriteString("\n## Eliminations\n\n")
	if len(res.Eliminations) == 0 {
		b.WriteString("None.\n")
	}
	for _, e := range res.Eliminations {
		fmt.Fprintf(&b, "- %s: %s in round %d (%s)\n", e.ParticipantID, e.Reason, e.Round, e.At)
	}
	b.WriteString("\n## Disagreements\n\n")
	if len(res.Disagreements) == 0 {
		b.WriteString("None.\n")
	}
	for _, d := range res.Disagreements {
		fmt.Fprintf(&b, "- %s on `%s`: %s\n", d.ParticipantID, d.ClaimID, mdLine(d.Reason))
	}
	fmt.Fprintf(&b, "\n## Report (%s)\n\n%s\n", res.Report.Mode, res.Report.FinalSummary)
	if a := res.Action; a != nil {
		fmt.Fprintf(&b, "\n## Action (%s)\n\n", a.Status)
		if a.Status == "completed" {
			fmt.Fprintf(&b, "%s: %s\n", a.ActorID, mdLine(a.Summary))
		} else {
			fmt.Fprintf(&b, "%s: %s\n", a.ActorID, mdLine(a.Error))
		}
	}
	io.WriteString(w, b.String())
}

func writeClaims(b *strings.Builder, res *Result) {
	b.WriteString("\n## Claims\n\n| Claim | Title | Resolution | Accept | Reject | Voters |\n|---|---|---|---|---|---|\n")
	byID := make(map[string]ClaimResolution, len(res.ClaimResolutions))
	for _, r := range res.ClaimResolutions {
		byID[r.ClaimID] = r
	}
	for _, c := range res.FinalClaims {
		if c.Status != ClaimActive {
			continue
		}
		r := byID[c.ClaimID]
		fmt.Fprintf(b, "| `%s` | %s | %s | %d | %d | %d |\n", c.ClaimID, mdCell(c.Title), r.Status,
			r.AcceptCount, r.RejectCount, r.TotalVoters)
	}
	var merged []string
	for _, c := range res.FinalClaims {
		if c.Status == ClaimMerged {
			merged = append(merged, fmt.Sprintf("`%s` → `%s`", c.ClaimID, c.MergedInto))
		}
	}
	if len(merged) > 0 {
		fmt.Fprintf(b, "\nMerged: %s\n", strings.Join(merged, ", "))
	}
}

// WriteFailureSummary writes the summary of a failed run.
func WriteFailureSummary(w io.Writer, f *Failure) {
	if f == nil {
		f = &Failure{Code: "UnknownError", Message: "no result"}
	}
	fmt.Fprintf(w, "# Run failed\n\n- **Code:** %s\n- **Message:** %s\n", f.Code, mdLine(f.Message))
}

func fmtScore(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) }

func mdLine(s string) string { return collapseSpace(s) }

func mdCell(s string) string { return strings.ReplaceAll(collapseSpace(s), "|", "\\|") }

func quote(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "> " + l
	}
	return strings.Join(lines, "\n")
}
