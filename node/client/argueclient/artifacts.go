package argueclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/concordmap/concord/consensus"
)

// outDirFor is where a run's files go: <outDir>/<requestId>/.
func outDirFor(outDir, requestID string) string { return filepath.Join(outDir, safeName(requestID)) }

// safeName turns a request id into a directory name: path separators and
// other troublesome bytes become '_' (request ids are caller-chosen text).
func safeName(id string) string {
	s := strings.Map(func(r rune) rune {
		switch {
		case r == '/' || r == '\\' || r == 0 || r < 0x20:
			return '_'
		}
		return r
	}, id)
	if s == "" || s == "." || s == ".." {
		return "_" + s
	}
	return s
}

// writeRemoteArtifacts writes a server run's files with consensus's
// writers: events.jsonl with the EventLogWriter (payloads kept as the
// server's bytes), result.json and summary.md from the decoded result.
func writeRemoteArtifacts(dir string, result json.RawMessage, failure *consensus.Failure, events []consensus.Event) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create artifact dir: %w", err)
	}
	var ev bytes.Buffer
	if err := consensus.WriteEventsJSONL(&ev, events); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "events.jsonl"), ev.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write events.jsonl: %w", err)
	}
	var sum bytes.Buffer
	if hasValue(result) {
		var res consensus.Result
		if err := json.Unmarshal(result, &res); err != nil {
			return fmt.Errorf("%w: result: %w", ErrBadResponse, err)
		}
		formatted, err := resultFile(result, &res)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "result.json"), formatted, 0o644); err != nil {
			return fmt.Errorf("write result.json: %w", err)
		}
		consensus.WriteSummary(&sum, &res)
	} else {
		consensus.WriteFailureSummary(&sum, failure)
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.md"), sum.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write summary.md: %w", err)
	}
	return nil
}

func hasValue(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && string(t) != "null"
}

// resultFile renders result.json with consensus.WriteResultJSON, so a
// server run's file is laid out exactly like a local run's. Decoding into
// consensus.Result is lossy at one edge (an empty-but-present trace or
// extractedClaims list is remembered in unexported fields a JSON decoder
// cannot set); when re-encoding does not give back the same JSON value,
// the server's object is kept, indented, instead: the data wins over the
// layout.
func resultFile(raw json.RawMessage, res *consensus.Result) ([]byte, error) {
	var b bytes.Buffer
	if err := consensus.WriteResultJSON(&b, res); err != nil {
		return nil, err
	}
	if sameJSON(raw, b.Bytes()) {
		return b.Bytes(), nil
	}
	b.Reset()
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return nil, fmt.Errorf("%w: result is not JSON: %w", ErrBadResponse, err)
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

// sameJSON reports whether a and b encode the same JSON value.
func sameJSON(a, b []byte) bool {
	var va, vb any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&va) != nil || db.Decode(&vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}
