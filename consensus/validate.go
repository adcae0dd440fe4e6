package consensus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"
)

// ParseRequest decodes, validates and normalises a start request (spec §2).
// On any problem it returns a *ValidationError listing every field error and
// no request. It is pure and safe for concurrent use.
func ParseRequest(raw []byte) (*Request, error) {
	v := &validator{}
	root, ok := v.decode(raw)
	if !ok {
		return nil, v.err()
	}
	m, ok := v.object(root, "")
	if !ok {
		return nil, v.err()
	}
	r := &Request{}
	v.parseTop(r, m)
	v.parseParticipants(r, m)
	v.parsePolicies(r, m)
	v.parseOptionalBlocks(r, m)
	r.validateInto(v)
	if len(v.errs) > 0 {
		return nil, v.err()
	}
	return r, nil
}

// Validate checks the invariants of a normalised request: ranges, enums,
// cross-field rules and unique participant ids. Apply calls it on every start
// input, so a Request built by hand is held to the same rules.
func (r *Request) Validate() error {
	v := &validator{}
	r.validateInto(v)
	return v.err()
}

type validator struct {
	errs []FieldError
}

func (v *validator) add(path, format string, args ...any) {
	v.errs = append(v.errs, FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) err() error {
	if len(v.errs) == 0 {
		return nil
	}
	return &ValidationError{Errors: append([]FieldError(nil), v.errs...)}
}

func (v *validator) decode(raw []byte) (any, bool) {
	if len(raw) > MaxRequestBytes {
		v.add("", "request exceeds %d bytes", MaxRequestBytes)
		return nil, false
	}
	if !utf8.Valid(raw) {
		v.add("", "request is not valid UTF-8")
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		v.add("", "malformed JSON: %s", err.Error())
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		v.add("", "unexpected data after the JSON value")
		return nil, false
	}
	return root, true
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (v *validator) object(val any, path string) (map[string]any, bool) {
	m, ok := val.(map[string]any)
	if !ok {
		v.add(path, "must be an object")
	}
	return m, ok
}

// block returns the policy object at key, or nil when absent (defaults apply).
func (v *validator) block(m map[string]any, key string) map[string]any {
	val, present := m[key]
	if !present {
		return nil
	}
	b, _ := v.object(val, key)
	return b
}

// closed rejects keys outside allowed (reportPolicy, waitingPolicy, actionPolicy).
func (v *validator) closed(m map[string]any, path string, allowed ...string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		known := false
		for _, a := range allowed {
			known = known || a == k
		}
		if !known {
			v.add(join(path, k), "unknown key")
		}
	}
}

// str reads an optional string; minLen 1 rejects "" when present.
func (v *validator) str(m map[string]any, key, path string, dst *string, minLen int) bool {
	val, present := m[key]
	if !present {
		return false
	}
	s, ok := val.(string)
	if !ok {
		v.add(join(path, key), "must be a string")
		return false
	}
	if utf16Len(s) < minLen {
		v.add(join(path, key), "must not be empty")
		return false
	}
	*dst = s
	return true
}

func (v *validator) required(m map[string]any, key, path string, dst *string) {
	if _, present := m[key]; !present {
		v.add(join(path, key), "is required")
		return
	}
	v.str(m, key, path, dst, 1)
}

func (v *validator) number(m map[string]any, key, path string) (float64, bool) {
	val, present := m[key]
	if !present {
		return 0, false
	}
	n, ok := val.(json.Number)
	if !ok {
		v.add(join(path, key), "must be a number")
		return 0, false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		v.add(join(path, key), "must be a finite number")
		return 0, false
	}
	return f, true
}

func (v *validator) integer(m map[string]any, key, path string, dst *int64) bool {
	f, ok := v.number(m, key, path)
	if !ok {
		return false
	}
	if f != math.Trunc(f) || math.Abs(f) > maxSafeInteger {
		v.add(join(path, key), "must be a safe integer")
		return false
	}
	*dst = int64(f)
	return true
}

func (v *validator) float(m map[string]any, key, path string, dst *float64) {
	if f, ok := v.number(m, key, path); ok {
		*dst = f
	}
}

func (v *validator) boolean(m map[string]any, key, path string, dst *bool) {
	val, present := m[key]
	if !present {
		return
	}
	b, ok := val.(bool)
	if !ok {
		v.add(join(path, key), "must be a boolean")
		return
	}
	*dst = b
}

func (v *validator) parseTop(r *Request, m map[string]any) {
	v.required(m, "requestId", "", &r.RequestID)
	v.required(m, "task", "", &r.Task)
}

func (v *validator) parseParticipants(r *Request, m map[string]any) {
	val, present := m["participants"]
	if !present {
		v.add("participants", "is required")
		return
	}
	list, ok := val.([]any)
	if !ok {
		v.add("participants", "must be an array")
		return
	}
	if len(list) > MaxParticipants {
		v.add("participants", "must have at most %d entries", MaxParticipants)
		return
	}
	for i, item := range list {
		path := fmt.Sprintf("participants[%d]", i)
		pm, ok := v.object(item, path)
		if !ok {
			continue
		}
		var p Participant
		v.required(pm, "id", path, &p.ID)
		var role string
		if v.str(pm, "role", path, &role, 0) {
			p.Role = &role
		}
		r.Participants = append(r.Participants, p)
	}
	if len(list) < 2 {
		v.add("participants", "must have at least 2 entries")
	}
}
