package jsonkit

import (
	"slices"
	"testing"
)

func TestLookup(t *testing.T) {
	keys := []string{"id", "from", "to"}
	tests := []struct {
		name string
		obj  string
		ok   bool
		want []string // raw values, "" for absent
	}{
		{"all", `{"id":"m1","from":"a","to":{"agent":"x"},"payload":{"id":"inner"}}`, true, []string{`"m1"`, `"a"`, `{"agent":"x"}`}},
		{"some", ` { "to" : [1, 2] } `, true, []string{"", "", `[1, 2]`}},
		{"empty", `{}`, true, []string{"", "", ""}},
		{"escaped key", `{"i\u0064":7}`, true, []string{"7", "", ""}},
		{"last duplicate wins", `{"id":"a","id":"b"}`, true, []string{`"b"`, "", ""}},
		{"not an object", `[1]`, false, nil},
		{"truncated", `{"id":"a"`, false, nil},
		{"missing colon", `{"id" "a"}`, false, nil},
		{"empty input", ``, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vals := make([][]byte, len(keys))
			if ok := Lookup([]byte(tt.obj), keys, vals); ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if !tt.ok {
				return
			}
			got := make([]string, len(vals))
			for i, v := range vals {
				got[i] = string(v)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("vals %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLookup_DoesNotAllocate(t *testing.T) {
	obj := []byte(`{"id":"m1","from":"a","to":{"agent":"x"},"payload":{"k":"v"},"meta":{}}`)
	keys := []string{"id", "from", "to"}
	vals := make([][]byte, len(keys))
	if n := testing.AllocsPerRun(100, func() { Lookup(obj, keys, vals) }); n != 0 {
		t.Fatalf("%v allocations per lookup, want 0", n)
	}
}
