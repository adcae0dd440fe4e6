package jsonkit

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// reference is encoding/json's encoding of s with HTML escaping off, the
// behaviour AppendString promises.
func reference(t testing.TB, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

var stringCases = []string{
	"", "plain-ascii_id.01", "a<b>&c", `q"uote`, `back\slash`, "tab\tnl\ncr\rbs\bff\f",
	"\x00\x01\x1f\x7f", "é ü 日本", "\u2028\u2029", "bad\xffutf8", "\xc3", "trunc\xe6\x97",
	"mixed <é> & \"x\" \\ \u2028 \xfe end", strings.Repeat("long ", 100) + "é",
}

func TestAppendString_MatchesEncodingJSON(t *testing.T) {
	for _, s := range stringCases {
		prefix := []byte("prefix:")
		got := AppendString(prefix, s)
		if want := reference(t, s); !bytes.Equal(got[len(prefix):], want) {
			t.Errorf("AppendString(%q) = %s, want %s", s, got[len(prefix):], want)
		}
		if string(got[:len(prefix)]) != "prefix:" {
			t.Errorf("AppendString(%q) changed the prefix: %s", s, got)
		}
	}
}

func TestAppendStrings(t *testing.T) {
	for _, ss := range [][]string{nil, {}, {"a"}, {"a", "<é>", "\x00"}} {
		want, _ := json.Marshal(append([]string{}, ss...))
		want = bytes.ReplaceAll(want, []byte(`\u003c`), []byte("<"))
		want = bytes.ReplaceAll(want, []byte(`\u003e`), []byte(">"))
		if got := AppendStrings(nil, ss); !bytes.Equal(got, want) {
			t.Errorf("AppendStrings(%q) = %s, want %s", ss, got, want)
		}
	}
}

func TestAppendString_FastPathAllocs(t *testing.T) {
	b := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { b = AppendString(b[:0], "agent-01ARZ3NDEK<&>") }); n != 0 {
		t.Fatalf("fast path allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { b = AppendString(b[:0], "é\n\"") }); n != 0 {
		t.Fatalf("slow path allocates %v times", n)
	}
}

// FuzzAppendString holds both paths to encoding/json (HTML escaping off)
// for every string, valid UTF-8 or not.
func FuzzAppendString(f *testing.F) {
	for _, s := range stringCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := AppendString(nil, s), reference(t, s); !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q) = %s, want %s", s, got, want)
		}
	})
}
