package mapsvc

import (
	"bytes"
	"encoding/json"
	"math"

	"github.com/concordmap/concord/node/internal/jsonkit"
	"github.com/concordmap/concord/node/rpc"
)

// params decodes one JSON params object field by field, so that a wrong
// type is reported as -32602 naming the field. Unknown fields are ignored
// (MAP policy: accept a superset). JSON null counts as absent. The first
// error wins; check err() once after reading every field.
type params struct {
	prefix string
	m      map[string]json.RawMessage
	e      *rpc.Error
}

// decodeParams reads a params object; absent params are an empty object.
func decodeParams(raw json.RawMessage) *params {
	p := &params{}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return p
	}
	if raw[0] != '{' {
		p.e = rpc.InvalidParams("params", "must be an object")
		return p
	}
	// A validating scan and one walk that splits the members, instead of
	// encoding/json's validation, reflection and a copy of every value
	// (values alias raw, the request's own buffer). Duplicate keys: the
	// last wins, as with json.Unmarshal.
	p.m = make(map[string]json.RawMessage, 8)
	if !rpc.ValidJSON(raw) || jsonkit.Members(raw, func(k string, v []byte) error {
		p.m[k] = v
		return nil
	}) != nil {
		p.m = nil
		p.e = rpc.InvalidParams("params", "must be a JSON object")
	}
	return p
}

func (p *params) err() *rpc.Error { return p.e }

func (p *params) fail(field, reason string) {
	if p.e == nil {
		p.e = rpc.InvalidParams(p.prefix+field, reason)
	}
}

// get returns the raw value of a present, non-null field.
func (p *params) get(field string) (json.RawMessage, bool) {
	v, ok := p.m[field]
	if !ok || len(v) == 0 || string(v) == "null" {
		return nil, false
	}
	return v, true
}

func (p *params) has(field string) bool {
	_, ok := p.get(field)
	return ok
}

// str reads an optional string.
func (p *params) str(field string) string {
	v, ok := p.get(field)
	if !ok {
		return ""
	}
	// v is valid JSON and UTF-8 (decodeParams), so Unquote decodes it
	// exactly as json.Unmarshal would, without its allocations.
	s, ok := jsonkit.Unquote(v)
	if !ok {
		p.fail(field, "must be a string")
		return ""
	}
	if idFields[field] {
		if why := checkID(s); why != "" {
			p.fail(field, why)
			return ""
		}
	}
	return s
}

// reqStr reads a required non-empty string.
func (p *params) reqStr(field string) string {
	if !p.has(field) {
		p.fail(field, "is required")
		return ""
	}
	s := p.str(field)
	if s == "" {
		p.fail(field, "must not be empty")
	}
	return s
}

// optStr reads an optional string and reports presence.
func (p *params) optStr(field string) (string, bool) {
	if !p.has(field) {
		return "", false
	}
	return p.str(field), true
}

// enum reads an optional string restricted to allowed values.
func (p *params) enum(field string, allowed ...string) string {
	s := p.str(field)
	if s == "" || p.e != nil {
		return s
	}
	for _, a := range allowed {
		if s == a {
			return s
		}
	}
	p.fail(field, "must be one of "+joinQuoted(allowed))
	return ""
}

// integer reads an optional integer (a JSON number without fraction).
func (p *params) integer(field string) (int64, bool) {
	v, ok := p.get(field)
	if !ok {
		return 0, false
	}
	var f float64
	if err := json.Unmarshal(v, &f); err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		p.fail(field, "must be an integer")
		return 0, false
	}
	return int64(f), true
}

// boolean reads an optional boolean.
func (p *params) boolean(field string) (bool, bool) {
	v, ok := p.get(field)
	if !ok {
		return false, false
	}
	var b bool
	if err := json.Unmarshal(v, &b); err != nil {
		p.fail(field, "must be a boolean")
		return false, false
	}
	return b, true
}

// strs reads an optional array of non-empty strings.
func (p *params) strs(field string) []string {
	v, ok := p.get(field)
	if !ok {
		return nil
	}
	var out []string
	if v[0] != '[' || json.Unmarshal(v, &out) != nil {
		p.fail(field, "must be an array of strings")
		return nil
	}
	for _, s := range out {
		if s == "" {
			p.fail(field, "must not contain empty strings")
			return nil
		}
		if idListFields[field] {
			if why := checkID(s); why != "" {
				p.fail(field, why)
				return nil
			}
		}
	}
	return out
}

// object reads an optional JSON object, returned raw (compacted copy).
func (p *params) object(field string) json.RawMessage {
	v, ok := p.get(field)
	if !ok {
		return nil
	}
	if v[0] != '{' {
		p.fail(field, "must be an object")
		return nil
	}
	return compact(v)
}

// array reads an optional JSON array, returned raw.
func (p *params) array(field string) json.RawMessage {
	v, ok := p.get(field)
	if !ok {
		return nil
	}
	if v[0] != '[' {
		p.fail(field, "must be an array")
		return nil
	}
	return compact(v)
}

// sub decodes a nested object field; absent gives an empty decoder.
// Errors are reported on the parent with a dotted field name.
func (p *params) sub(field string) *params {
	c := &params{prefix: p.prefix + field + "."}
	v, ok := p.get(field)
	if !ok {
		return c
	}
	if v[0] != '{' || json.Unmarshal(v, &c.m) != nil {
		p.fail(field, "must be an object")
	}
	return c
}

// merge copies a child's error to the parent.
func (p *params) merge(c *params) {
	if p.e == nil {
		p.e = c.e
	}
}

func compact(v json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return append(json.RawMessage(nil), v...)
	}
	return b.Bytes()
}

func joinQuoted(list []string) string {
	var b bytes.Buffer
	for i, s := range list {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`"` + s + `"`)
	}
	return b.String()
}
