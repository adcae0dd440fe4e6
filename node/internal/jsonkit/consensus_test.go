package jsonkit_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/internal/jsonkit"
)

// FuzzConsensusCopy cross-checks the one string appender that cannot use
// this package: consensus may not import node (depcheck), so its event
// encoder keeps its own copy, which matches encoding/json's default
// (HTML-escaping) Marshal because the engine's other payloads are
// marshalled that way. For every string, the consensus bytes must be
// AppendString's with <, > and & escaped, nothing else different.
func FuzzConsensusCopy(f *testing.F) {
	for _, s := range []string{"", "plain", "a<b>&c", "é\n\"\\", "\u2028", "bad\xffutf8", "\x00\x7f"} {
		f.Add(s)
	}
	const key, next = `,"summary":`, `,"extractedClaims":`
	f.Fuzz(func(t *testing.T, s string) {
		p := consensus.ParticipantRespondedPayload{Summary: s}
		out := p.AppendJSON(nil)
		// An encoded string cannot contain next (its quotes would be
		// escaped), so the first one after key ends the summary.
		i := bytes.Index(out, []byte(key))
		j := bytes.Index(out[i+len(key):], []byte(next))
		if i < 0 || j < 0 {
			t.Fatalf("no summary in %s", out)
		}
		got := out[i+len(key) : i+len(key)+j]
		var want bytes.Buffer
		json.HTMLEscape(&want, jsonkit.AppendString(nil, s))
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("consensus encodes %q as %s, jsonkit (HTML-escaped) as %s", s, got, want.Bytes())
		}
	})
}
