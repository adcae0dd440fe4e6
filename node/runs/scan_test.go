package runs

import (
	"encoding/json"
	"fmt"
	"testing"
)

func TestMembers(t *testing.T) {
	tests := []struct {
		in   string
		want string // "k=v;..." or "!" when refused
	}{
		{`{}`, ""},
		{` { "a" : 1 , "b":"x" } `, `a=1;b="x";`},
		{`{"payload":{"kind":"round","output":{"s":"a \"quoted\" } ]"}},"meta":{"correlationId":"r/r0/p1"}}`,
			`payload={"kind":"round","output":{"s":"a \"quoted\" } ]"}};meta={"correlationId":"r/r0/p1"};`},
		{`{"p\u0061yload":[1,[2,{"x":null}]],"t":true}`, `payload=[1,[2,{"x":null}]];t=true;`},
		{`{"a":-1.5e3,"b":null}`, `a=-1.5e3;b=null;`},
		{`[]`, "!"},
		{`"x"`, "!"},
		{``, "!"},
		{`{"a":1`, "!"},
		{`{"a":}`, "!"},
		{`{"a":1,}`, "!"},
		{`{"a" 1}`, "!"},
		{`{a:1}`, "!"},
		{`{"a":"unterminated}`, "!"},
		{`{"a":{"b":1}`, "!"},
		{`{"a":1} x`, "!"},
	}
	for _, tc := range tests {
		got := ""
		ok := members([]byte(tc.in), func(k string, v []byte) bool {
			got += fmt.Sprintf("%s=%s;", k, v)
			return true
		})
		if !ok {
			got = "!"
		}
		if got != tc.want {
			t.Errorf("members(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzMembers: on valid JSON, members agrees with encoding/json.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[{"c":"d"}]}`, `{}`, `{"x":"\"}"}`, `{"a":{"b":[1,2,{"c":null}]},"e":false}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := map[string]string{}
		ok := members(b, func(k string, v []byte) bool {
			got[k] = string(v)
			return true
		})
		var want map[string]json.RawMessage
		if json.Unmarshal(b, &want) != nil || want == nil {
			return // invalid input: only not crashing matters
		}
		if !ok {
			t.Fatalf("valid object refused: %q", b)
		}
		if len(got) != len(want) {
			t.Fatalf("members %v, encoding/json %v", got, want)
		}
		for k, v := range want {
			if !json.Valid([]byte(got[k])) {
				t.Fatalf("member %q value %q is not the JSON value %q", k, got[k], v)
			}
		}
	})
}
