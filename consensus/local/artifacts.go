package local

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/concordmap/concord/consensus"
)

// WriteArtifacts writes argue's run files,  result.json, events.jsonl and summary.md into dir
// (created if missing). res may be nil for a failed run, in which case
// result.json is skipped and summary.md describes the failure.
func WriteArtifacts(dir string, res *consensus.Result, failure *consensus.Failure, events []consensus.Event) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create artifact dir: %w", err)
	}
	var ev, sum bytes.Buffer
	if err := consensus.WriteEventsJSONL(&ev, events); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "events.jsonl"), ev.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write events.jsonl: %w", err)
	}
	if res != nil {
		var rb bytes.Buffer
		if err := consensus.WriteResultJSON(&rb, res); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "result.json"), rb.Bytes(), 0o644); err != nil {
			return fmt.Errorf("write result.json: %w", err)
		}
		consensus.WriteSummary(&sum, res)
	} else {
		consensus.WriteFailureSummary(&sum, failure)
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.md"), sum.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write summary.md: %w", err)
	}
	return nil
}
