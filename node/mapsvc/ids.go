package mapsvc

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// MaxIDLength bounds every identifier a client names (agent, scope,
// session, participant ids, parents, persistent ids), in bytes. Ids are
// keys in replicated state, metric-free but logged and echoed: 256 bytes
// is ample for ULIDs, URNs and readable names.
const MaxIDLength = 256

// idFields are the string params holding identifiers; idListFields the
// arrays of them. They get checkID on top of their type checks.
var (
	idFields = map[string]bool{
		"agentId": true, "scopeId": true, "sessionId": true, "participantId": true,
		"parent": true, "persistentId": true, "subscriptionId": true, "clientId": true,
	}
	idListFields = map[string]bool{"scopes": true, "requestedScopes": true, "reclaimAgents": true}
)

// checkID returns why s is not an acceptable identifier, or "". Control
// characters (NUL, newlines, escapes) would corrupt logs and line-based
// tools; invalid UTF-8 cannot round-trip through JSON; U+FFFD is what a
// lone surrogate escape (\ud800) decodes to, so accepting it would store
// an id other than the one the participant sent.
func checkID(s string) string {
	if len(s) > MaxIDLength {
		return "must be at most " + strconv.Itoa(MaxIDLength) + " bytes"
	}
	if !utf8.ValidString(s) {
		return "must be valid UTF-8"
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return "must not contain control characters"
		}
		if r == utf8.RuneError {
			return "must be valid Unicode (no lone surrogates, no U+FFFD)"
		}
	}
	return ""
}
