package jsonkit

import (
	"errors"
	"strings"
	"testing"
)

// kv is one (key, raw value) pair as Members reports it.
type kv struct{ k, v string }

func collect(t *testing.T, s string) ([]kv, error) {
	t.Helper()
	var got []kv
	err := Members([]byte(s), func(k string, v []byte) error {
		got = append(got, kv{k, string(v)})
		return nil
	})
	return got, err
}

func TestMembers(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []kv
	}{
		{"empty", ` { } `, nil},
		{"order and duplicates kept", `{"b":1,"a":2,"b":3}`, []kv{{"b", "1"}, {"a", "2"}, {"b", "3"}}},
		{"whitespace around tokens", " {\n\t\"a\" :\r [ 1 , 2 ] , \"b\":null}", []kv{{"a", "[ 1 , 2 ]"}, {"b", "null"}}},
		{"brackets inside strings", `{"a":{"x":"}]"},"b":["{"]}`, []kv{{"a", `{"x":"}]"}`}, {"b", `["{"]`}}},
		{"escaped key decoded", `{"a\"b":1,"\u00e9":2}`, []kv{{`a"b`, "1"}, {"é", "2"}}},
		{"escaped quote in value", `{"a":"x\"}"}`, []kv{{"a", `"x\"}"`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := collect(t, tt.in)
			if err != nil {
				t.Fatalf("Members(%q): %v", tt.in, err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("Members(%q) = %v, want %v", tt.in, got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("member %d = %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestMembersMalformed(t *testing.T) {
	for _, in := range []string{
		``, `   `, `[]`, `"x"`, `{`, `{"a"`, `{"a":`, `{"a":1`, `{"a":1,`, `{"a":1,}`, `{"a" 1}`,
		`{a:1}`, `{"a":1 "b":2}`, `{"a":"x}`, `{"a":{"b":1}`, `{"a":[1,2}`, `{"\q":1}`,
		`{"a":}`, `{"a":1} x`, `{} {}`, `{"a":1}}`,
	} {
		if _, err := collect(t, in); !errors.Is(err, ErrMalformed) {
			t.Errorf("Members(%q) = %v, want ErrMalformed", in, err)
		}
		if out, ok := WithoutMember([]byte(in), "a"); ok {
			t.Errorf("WithoutMember(%q) = %q, true; want not ok", in, out)
		}
	}
	// Members decodes every key, so a raw control character in one is
	// caught; WithoutMember decodes only escaped keys (to stay allocation
	// free) and passes such a member through untouched.
	const ctl = "{\"a\x01\":1}"
	if _, err := collect(t, ctl); !errors.Is(err, ErrMalformed) {
		t.Errorf("Members(%q) = %v, want ErrMalformed", ctl, err)
	}
	if out, ok := WithoutMember([]byte(ctl), "a"); !ok || string(out) != ctl {
		t.Errorf("WithoutMember(%q) = %q, %v; want it unchanged", ctl, out, ok)
	}
}

// A callback error stops the walk and is returned as is, even when the
// rest of the object would not parse.
func TestMembersCallbackError(t *testing.T) {
	stop := errors.New("stop")
	calls := 0
	err := Members([]byte(`{"a":1,"b":2 garbage`), func(k string, _ []byte) error {
		calls++
		if k == "a" {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("err = %v after %d calls, want stop after 1", err, calls)
	}
}

func TestWithoutMember(t *testing.T) {
	tests := []struct{ name, in, key, want string }{
		{"empty", ` {} `, "payload", `{}`},
		{"absent", `{"a":1,"b":[2]}`, "payload", `{"a":1,"b":[2]}`},
		{"first", `{"payload":{"x":1},"a":1}`, "payload", `{"a":1}`},
		{"middle", `{"a":1,"payload":"}","b":2}`, "payload", `{"a":1,"b":2}`},
		{"last", `{"a":1,"payload":null}`, "payload", `{"a":1}`},
		{"only", `{"payload":1}`, "payload", `{}`},
		{"every duplicate", `{"payload":1,"a":2,"payload":3}`, "payload", `{"a":2}`},
		{"escaped key matches", `{"pay\u006coad":1,"a":2}`, "payload", `{"a":2}`},
		{"members kept as written", `{ "a" : [ 1 ] , "payload":0 , "b" :"x" }`, "payload", `{"a" : [ 1 ],"b" :"x"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := WithoutMember([]byte(tt.in), tt.key)
			if !ok || string(got) != tt.want {
				t.Fatalf("WithoutMember(%q, %q) = %q, %v; want %q", tt.in, tt.key, got, ok, tt.want)
			}
		})
	}
}

// The event hub strips payloads on its fan-out path: comparing unescaped
// keys must not allocate, so the result buffer is the only allocation.
func TestWithoutMemberAllocs(t *testing.T) {
	obj := []byte(`{"messageId":"m","from":"a","to":"b","timestamp":1,"payload":{"x":` + strings.Repeat("1", 64) + `}}`)
	allocs := testing.AllocsPerRun(100, func() {
		if _, ok := WithoutMember(obj, "payload"); !ok {
			t.Fatal("not walked")
		}
	})
	if allocs != 1 {
		t.Fatalf("WithoutMember allocated %v times per run, want 1 (the result)", allocs)
	}
}

func TestUnquote(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{`"abc"`, "abc", true},
		{`""`, "", true},
		{`"a\nb\u00e9"`, "a\nb\u00e9", true},
		{`"\q"`, "", false},
		{"\"a\x01\"", "", false},
		{`abc`, "", false},
		{`"`, "", false},
		{`"abc`, "", false},
		{`1`, "", false},
	}
	for _, tt := range tests {
		got, ok := Unquote([]byte(tt.in))
		if got != tt.want || ok != tt.ok {
			t.Errorf("Unquote(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
