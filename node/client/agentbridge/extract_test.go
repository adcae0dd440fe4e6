package agentbridge

import (
	"errors"
	"strings"
	"testing"
)

func TestExtractJSON(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // "" = ErrNoJSON
	}{
		{"plain object", `{"a":1}`, `{"a":1}`},
		{"surrounding whitespace", "\n  {\"a\":1}\n\n", `{"a":1}`},
		{"prose before and after", "Sure! Here is my answer: {\"a\":1} Hope it helps.", `{"a":1}`},
		{"json fence", "Thinking...\n```json\n{\"a\":1}\n```\nDone.", `{"a":1}`},
		{"JSON fence upper case", "```JSON\n{\"a\":2}\n```", `{"a":2}`},
		{"bare fence", "```\n{\"a\":3}\n```", `{"a":3}`},
		{"non-json fence ignored", "```python\n{\"a\":1}\n```\nand {\"b\":2}", `{"b":2}`},
		{"multiple fences: last valid wins", "draft:\n```json\n{\"v\":1}\n```\nfinal:\n```json\n{\"v\":2}\n```", `{"v":2}`},
		{"last fence invalid: earlier valid one", "```json\n{\"v\":1}\n```\n```json\n{\"v\":2,\n```", `{"v":1}`},
		{"fences win over loose objects", "```json\n{\"v\":1}\n```\nlater {\"v\":9}", `{"v":1}`},
		{"multiple loose objects: last wins", `first {"v":1} then {"v":2} end`, `{"v":2}`},
		{"nested braces in strings", `answer: {"a":"}{ not a brace }","b":{"c":"{"}} bye`, `{"a":"}{ not a brace }","b":{"c":"{"}}`},
		{"escaped quote in string", `x {"a":"say \"}\" ok"} y`, `{"a":"say \"}\" ok"}`},
		{"nested object is not split", `{"outer":{"inner":1}}`, `{"outer":{"inner":1}}`},
		{"prose braces before object", `I think {this} matters: {"a":1}`, `{"a":1}`},
		{"object inside an invalid region", `{broken {"a":1} still broken}`, `{"a":1}`},
		{"array only is not an answer", `[1,2,3]`, ""},
		{"garbage", `no json here at all`, ""},
		{"unbalanced", `{"a":1`, ""},
		{"empty", ``, ""},
		{"string only", `"{\"a\":1}"`, ""},
		{"unterminated fence falls back", "```json\n{\"a\":1}", `{"a":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ExtractJSON([]byte(tt.in))
			if tt.want == "" {
				if !errors.Is(err, ErrNoJSON) {
					t.Fatalf("ExtractJSON = %s, %v; want ErrNoJSON", got, err)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("ExtractJSON = %s, %v; want %s", got, err, tt.want)
			}
		})
	}
}

// TestExtractJSON_Pathological checks that brace soup is handled in
// bounded time.
func TestExtractJSON_Pathological(t *testing.T) {
	in := strings.Repeat("{", 1<<20)
	if _, err := ExtractJSON([]byte(in)); !errors.Is(err, ErrNoJSON) {
		t.Fatalf("err = %v", err)
	}
	in = strings.Repeat(`{"a":`, 1000) + "1" + strings.Repeat("}", 1000)
	if got, err := ExtractJSON([]byte("x " + in)); err != nil || len(got) != len(in) {
		t.Fatalf("deep object: %d bytes, %v", len(got), err)
	}
}

func FuzzExtractJSON(f *testing.F) {
	for _, s := range []string{`{"a":1}`, "```json\n{}\n```", `x {"a":"}"} y`, `{{{`, `"\"{"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ExtractJSON(b)
		if err == nil && !isObject(got) {
			t.Fatalf("returned a non-object %q", got)
		}
	})
}
