package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// FuzzLineReader checks the NDJSON framing of stdin (the stdio bridge and
// ServeStdio) against a plain split on '\n': every non-blank line comes
// back whole or is refused as too large with a JSON answer, blank lines
// are skipped, and reading ends at EOF.
func FuzzLineReader(f *testing.F) {
	for _, s := range []string{"", "\n", " \n\t\n", "{}\n{}", `{"id":1,"x":"` + string(bytes.Repeat([]byte("a"), 40)) + "\"}\n[]\n", "a\r\nb", "\xff\n\x00\n"} {
		f.Add([]byte(s), uint8(16))
	}
	f.Fuzz(func(t *testing.T, data []byte, max uint8) {
		limit := int64(max) + 1
		lr := NewLineReader(bytes.NewReader(data), limit)
		var want [][]byte // nil entry: a line over the limit
		lines := bytes.Split(data, []byte("\n"))
		for i, line := range lines {
			if i == len(lines)-1 && len(line) == 0 {
				break // data ended with '\n'
			}
			switch {
			case int64(len(line)) > limit:
				want = append(want, nil)
			case skipSpace(line, 0) < len(line):
				want = append(want, line)
			}
		}
		for i := 0; ; i++ {
			msg, err := lr.Next()
			if errors.Is(err, io.EOF) {
				if i != len(want) {
					t.Fatalf("%q: %d messages, want %d", data, i, len(want))
				}
				return
			}
			if i >= len(want) {
				t.Fatalf("%q: message %d (%q, %v) past the %d expected", data, i, msg, err, len(want))
			}
			if resp, ok := TooLargeResponse(err); ok {
				if want[i] != nil || !json.Valid(resp) {
					t.Fatalf("%q: message %d refused as too large (%s), want %q", data, i, resp, want[i])
				}
				continue
			}
			if err != nil {
				t.Fatalf("%q: message %d: %v", data, i, err)
			}
			if got := bytes.TrimSuffix(msg, []byte("\n")); !bytes.Equal(got, want[i]) {
				t.Fatalf("%q: message %d = %q, want %q", data, i, got, want[i])
			}
			if resp, ok := ParseErrorResponse(msg); ok && !json.Valid(resp) {
				t.Fatalf("parse error answer %q is not JSON", resp)
			}
		}
	})
}
