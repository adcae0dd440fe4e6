package rpc

import (
	"encoding/json"
	"errors"
	"testing"
)

// TestParams: every accessor, and the one wording per kind of mistake.
func TestParams(t *testing.T) {
	type read func(Params) (any, error)
	str := func(k string) read { return func(p Params) (any, error) { return p.String(k) } }
	req := func(k string) read { return func(p Params) (any, error) { return p.RequiredString(k) } }
	num := func(k string) read {
		return func(p Params) (any, error) {
			n, ok, err := p.Int(k)
			if !ok {
				return "absent", err
			}
			return n, err
		}
	}
	tests := []struct {
		name   string
		params string
		read   read
		want   any
		field  string // "" = no error
		reason string
	}{
		{"optional string", `{"a":"x"}`, str("a"), "x", "", ""},
		{"optional absent", `{}`, str("a"), "", "", ""},
		{"optional null", `{"a":null}`, str("a"), "", "", ""},
		{"optional empty", `{"a":""}`, str("a"), "", "", ""},
		{"optional wrong type", `{"a":5}`, str("a"), "", "a", "must be a string"},
		{"required", `{"a":"x\u00e9"}`, req("a"), "xé", "", ""},
		{"required absent", `{"b":"x"}`, req("a"), "", "a", "required"},
		{"required null", `{"a":null}`, req("a"), "", "a", "required"},
		{"required empty", `{"a":""}`, req("a"), "", "a", "must not be empty"},
		{"required wrong type", `{"a":["x"]}`, req("a"), "", "a", "must be a string"},
		{"int", `{"n":42}`, num("n"), int64(42), "", ""},
		{"int absent", `{}`, num("n"), "absent", "", ""},
		{"int negative", `{"n":-1}`, num("n"), "absent", "n", "must be a non-negative integer"},
		{"int float", `{"n":1.5}`, num("n"), "absent", "n", "must be a non-negative integer"},
		{"int string", `{"n":"1"}`, num("n"), "absent", "n", "must be a non-negative integer"},
		{"null params", `null`, str("a"), "", "", ""},
		{"absent params", ``, req("a"), "", "a", "required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseParams(json.RawMessage(tc.params))
			if err != nil {
				t.Fatal(err)
			}
			got, err := tc.read(p)
			if tc.field == "" {
				if err != nil || got != tc.want {
					t.Fatalf("got %v, %v; want %v", got, err, tc.want)
				}
				return
			}
			checkInvalid(t, err, tc.field, tc.reason)
		})
	}
}

func TestParseParams_NotAnObject(t *testing.T) {
	for _, raw := range []string{`[]`, `"x"`, `1`, `{`, `{"a":1} x`} {
		_, err := ParseParams(json.RawMessage(raw))
		checkInvalid(t, err, "params", "must be an object")
	}
}

func checkInvalid(t *testing.T, err error, field, reason string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeInvalidParams {
		t.Fatalf("err = %v, want -32602", err)
	}
	if d := e.Data.Details; d["field"] != field || d["reason"] != reason {
		t.Fatalf("details %v, want field %q reason %q", e.Data.Details, field, reason)
	}
}
