package argueclient

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

func msTime(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

// WriteRun writes a readable description of a run (get's text output).
func WriteRun(w io.Writer, info *RunInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "run\t%s\n", info.RunID)
	fmt.Fprintf(tw, "request\t%s\n", info.RequestID)
	fmt.Fprintf(tw, "status\t%s (phase %s, round %d)\n", info.Status, orNone(info.Phase), info.Round)
	started := msTime(info.StartedAt)
	if info.StartedBy != "" {
		started += " by " + info.StartedBy
	}
	fmt.Fprintf(tw, "started\t%s\n", started)
	if info.FinishedAt > 0 {
		fmt.Fprintf(tw, "finished\t%s (%s)\n", msTime(info.FinishedAt),
			time.Duration(info.FinishedAt-info.StartedAt)*time.Millisecond)
	}
	fmt.Fprintf(tw, "participants\t%s\n", strings.Join(info.Participants, ", "))
	fmt.Fprintf(tw, "active\t%s\n", strings.Join(info.ActiveParticipants, ", "))
	for _, e := range info.Eliminations {
		fmt.Fprintf(tw, "eliminated\t%s in round %d: %s\n", e.ParticipantID, e.Round, e.Reason)
	}
	if info.Error != nil {
		fmt.Fprintf(tw, "error\t%s: %s\n", info.Error.Code, info.Error.Message)
	}
	if hasValue(info.Result) {
		oc, err := info.Outcome("")
		if err == nil && oc.Result != nil {
			res := oc.Result
			resolved := 0
			for _, cr := range res.ClaimResolutions {
				if cr.Status == "resolved" {
					resolved++
				}
			}
			fmt.Fprintf(tw, "result\t%s; representative %s; %d claims, %d resolved\n", res.Status,
				orNone(res.Representative.ParticipantID), len(res.FinalClaims), resolved)
		}
	}
	if len(info.Events) > 0 {
		fmt.Fprintf(tw, "events\t%d\n", len(info.Events))
	}
	return tw.Flush()
}

// WriteRunList writes list's text output: one row per run.
func WriteRunList(w io.Writer, runs []Summary, nextCursor string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tREQUEST\tSTATUS\tPHASE\tROUND\tPARTICIPANTS\tSTARTED")
	for _, s := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d/%d\t%s\n", s.RunID, s.RequestID, s.Status, orNone(s.Phase), s.Round,
			len(s.ActiveParticipants), len(s.Participants), msTime(s.StartedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if nextCursor != "" {
		_, err := fmt.Fprintf(w, "more: --cursor %s\n", nextCursor)
		return err
	}
	return nil
}
