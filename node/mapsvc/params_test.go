package mapsvc

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestDecodeParams(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want map[string]json.RawMessage // nil with ok false: refused
		ok   bool
	}{
		{"absent", ``, nil, true},
		{"null", ` null `, nil, true},
		{"empty object", `{}`, map[string]json.RawMessage{}, true},
		{"members and whitespace", ` { "a" : [1, 2] ,"b":{"c":null}} `, map[string]json.RawMessage{"a": json.RawMessage(`[1, 2]`), "b": json.RawMessage(`{"c":null}`)}, true},
		{"duplicate key: the last wins", `{"a":1,"a":"two"}`, map[string]json.RawMessage{"a": json.RawMessage(`"two"`)}, true},
		{"escaped key", `{"\u0061gentId":"x"}`, map[string]json.RawMessage{"agentId": json.RawMessage(`"x"`)}, true},
		{"array", `[1]`, nil, false},
		{"truncated", `{"a":`, nil, false},
		{"bad value", `{"a":tru}`, nil, false},
		{"trailing data", `{"a":1} {}`, nil, false},
		{"bad string", "{\"a\":\"\x01\"}", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := decodeParams(json.RawMessage(tt.raw))
			if ok := p.err() == nil; ok != tt.ok {
				t.Fatalf("err = %v, want ok %v", p.err(), tt.ok)
			}
			if tt.ok && tt.want != nil && !reflect.DeepEqual(p.m, tt.want) {
				t.Fatalf("members = %q, want %q", p.m, tt.want)
			}
		})
	}
}

// BenchmarkDecodeParams: the params of a map/agents/update, split by
// decodeParams beside encoding/json's map decode (what it did before).
func BenchmarkDecodeParams(b *testing.B) {
	raw := json.RawMessage(`{"agentId":"bench-agent-17","state":"busy","metadata":{"n":42,"note":"bench write"},"reason":"load"}`)
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(raw, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decodeParams", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if p := decodeParams(raw); p.err() != nil {
				b.Fatal(p.err())
			}
		}
	})
	b.Run("decodeUpdate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeUpdate(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestParamsStr_MatchesUnmarshal: params.str decodes a string member as
// json.Unmarshal does (escapes, surrogate pairs, raw UTF-8) and refuses
// every other type.
func TestParamsStr_MatchesUnmarshal(t *testing.T) {
	for _, v := range []string{`""`, `"plain"`, `"tab\tquote\"back\\slash\/"`, `"\u0041\u00e9\ud83d\ude00"`, `"é日本"`, `"\ud800"`, `"<&>"`} {
		var want string
		if err := json.Unmarshal([]byte(v), &want); err != nil {
			t.Fatal(err)
		}
		p := decodeParams(json.RawMessage(`{"reason":` + v + `}`))
		if got := p.str("reason"); got != want || p.err() != nil {
			t.Errorf("str(%s) = %q (%v), want %q", v, got, p.err(), want)
		}
	}
	for _, v := range []string{`1`, `true`, `{}`, `["x"]`} {
		p := decodeParams(json.RawMessage(`{"reason":` + v + `}`))
		if got := p.str("reason"); got != "" || p.err() == nil {
			t.Errorf("str(%s) = %q, err %v: want refused", v, got, p.err())
		}
	}
}

// TestDecodeUpdate_Allocs bounds what decoding a map/agents/update costs
// (21 allocations before strings skipped encoding/json and absent
// optional fields stopped moving a variable to the heap each).
func TestDecodeUpdate_Allocs(t *testing.T) {
	raw := json.RawMessage(`{"agentId":"bench-agent-17","state":"busy","reason":"load"}`)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := decodeUpdate(raw); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%.0f allocations", allocs)
	if allocs > 12 {
		t.Errorf("%.0f allocations decoding an update, want at most 12", allocs)
	}
}
