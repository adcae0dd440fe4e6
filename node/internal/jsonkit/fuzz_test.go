package jsonkit

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzMembers checks the member walker against encoding/json on valid
// objects: same keys, same raw values (last duplicate wins in both).
// Anything else must come back as an error, never a panic.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"b":[1,{"c":"}"}],"d\"":"x\\\""}`, ` { "a" : null , "a":true } `, `{"k":"\u00e9"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want map[string]json.RawMessage
		// Invalid UTF-8 never gets here: the rpc layer rejects such frames.
		if !utf8.ValidString(s) || json.Unmarshal([]byte(s), &want) != nil || want == nil {
			_ = Members([]byte(s), func(string, []byte) error { return nil }) // must not panic
			return
		}
		got := map[string]json.RawMessage{}
		if err := Members([]byte(s), func(k string, v []byte) error { got[k] = v; return nil }); err != nil {
			t.Fatalf("Members(%q): %v", s, err)
		}
		if len(got) != len(want) {
			t.Fatalf("keys: got %d want %d", len(got), len(want))
		}
		for k, v := range want {
			if string(got[k]) != string(v) {
				t.Fatalf("key %q: got %s want %s", k, got[k], v)
			}
		}
	})
}

// FuzzWithoutMember checks payload stripping against encoding/json: same
// members minus "payload", values byte for byte.
func FuzzWithoutMember(f *testing.F) {
	for _, s := range []string{`{}`, `{"payload":1}`, `{"a":1,"payload":{"x":[1,"}"]},"b":"\"q"}`, ` { "payload" : null , "c" : [ ] } `} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, ok := WithoutMember([]byte(s), "payload")
		var in map[string]json.RawMessage
		if !utf8.ValidString(s) || json.Unmarshal([]byte(s), &in) != nil || in == nil {
			return // only objects the registry/router produce matter; no panic is the check
		}
		if !ok {
			t.Fatalf("valid object %q not walked", s)
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%q -> invalid %q: %v", s, out, err)
		}
		delete(in, "payload")
		if len(got) != len(in) {
			t.Fatalf("%q -> %q", s, out)
		}
		for k, v := range in {
			if string(got[k]) != string(v) {
				t.Fatalf("%q: member %q = %s, want %s", s, k, got[k], v)
			}
		}
	})
}
