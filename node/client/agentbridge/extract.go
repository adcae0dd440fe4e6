package agentbridge

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Extraction budget: a pathological output (thousands of unbalanced
// braces) must not cost quadratic time.
const (
	maxCandidates   = 4096
	maxScannedBytes = 64 << 20
)

// ExtractJSON finds the JSON object answer in a command's output. LLM CLIs
// wrap their answer in prose and code fences, and often show an example or
// a draft before the final answer, so the rule prefers the LAST candidate:
//
//  1. the whole output (trimmed) when it is one JSON object;
//  2. else the last fenced code block (```json, ```JSON or a bare ```)
//     whose content is a JSON object;
//  3. else the last top-level balanced {...} region of the text that is a
//     valid JSON object (brace matching skips braces inside JSON strings;
//     a region that does not parse is searched for objects nested in it).
//
// Only objects count: a bare array, number or string is not an answer.
// It returns ErrNoJSON when nothing qualifies.
func ExtractJSON(out []byte) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(out)
	if isObject(trimmed) {
		return trimmed, nil
	}
	if obj := lastFenced(out); obj != nil {
		return obj, nil
	}
	if obj := lastBalanced(out); obj != nil {
		return obj, nil
	}
	return nil, fmt.Errorf("%w (%d bytes of output: %s)", ErrNoJSON, len(out), preview(trimmed, 120))
}

func isObject(b []byte) bool {
	return len(b) > 1 && b[0] == '{' && json.Valid(b)
}

// lastFenced returns the last fenced block holding a JSON object.
func lastFenced(out []byte) json.RawMessage {
	var found json.RawMessage
	rest := out
	for {
		open := bytes.Index(rest, []byte("```"))
		if open < 0 {
			return found
		}
		rest = rest[open+3:]
		nl := bytes.IndexByte(rest, '\n')
		if nl < 0 {
			return found
		}
		lang := string(bytes.TrimSpace(rest[:nl]))
		body := rest[nl+1:]
		end := bytes.Index(body, []byte("```"))
		if end < 0 {
			return found
		}
		content := bytes.TrimSpace(body[:end])
		rest = body[end+3:]
		if (lang == "" || lang == "json" || lang == "JSON" || lang == "jsonc") && isObject(content) {
			found = content
		}
	}
}

// lastBalanced returns the last top-level balanced {...} region that is a
// JSON object; a region that does not parse is searched from its second
// byte, so an object nested in it can still be found.
func lastBalanced(out []byte) json.RawMessage {
	var found json.RawMessage
	candidates, scanned := 0, 0
	for i := 0; i < len(out); {
		start := bytes.IndexByte(out[i:], '{')
		if start < 0 {
			break
		}
		start += i
		if candidates++; candidates > maxCandidates || scanned > maxScannedBytes {
			break
		}
		end := matchBrace(out, start)
		if end < 0 {
			scanned += len(out) - start
			i = start + 1
			continue
		}
		scanned += end - start
		if region := out[start : end+1]; json.Valid(region) {
			found = region
			i = end + 1
			continue
		}
		i = start + 1
	}
	return found
}

// matchBrace returns the index of the '}' closing the '{' at start, skipping
// braces inside JSON strings, or -1.
func matchBrace(b []byte, start int) int {
	depth, inStr, esc := 0, false, false
	for i := start; i < len(b); i++ {
		c := b[i]
		switch {
		case inStr && esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case inStr && c == '"':
			inStr = false
		case inStr:
		case c == '"':
			inStr = true
		case c == '{':
			depth++
		case c == '}':
			if depth--; depth == 0 {
				return i
			}
		}
	}
	return -1
}

func preview(b []byte, n int) string {
	if len(b) > n {
		return fmt.Sprintf("%q...", b[:n])
	}
	return fmt.Sprintf("%q", b)
}
