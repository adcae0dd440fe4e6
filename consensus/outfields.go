package consensus

import "bytes"

// Member names of the round-output envelope and their lookup.

// Member names, in the order the decode switches number them.
var (
	envelopeFields = names("kind", "output")
	outputFields   = names("participantId", "phase", "round", "fullResponse", "summary", "taskTitle",
		"extractedClaims", "judgements", "claimVotes", "selfScore", "respondedAt")
	claimFields     = names("title", "statement", "category", "claimId")
	judgementFields = names("claimId", "stance", "confidence", "rationale", "revisedStatement", "mergesWith")
	voteFields      = names("claimId", "vote", "reason")

	kindNames     = names("round")
	categoryNames = names("pro", "con", "risk", "tradeoff", "todo")
	stanceNames   = names(StanceAgree, StanceDisagree, StanceRevise)
	voteNames     = names(VoteAccept, VoteReject)
)

func names(s ...string) [][]byte {
	out := make([][]byte, len(s))
	for i := range s {
		out[i] = []byte(s[i])
	}
	return out
}

// The xxxField functions return the index of member name key in the
// matching names table, or -1: an exact match is a switch (the common case),
// anything else goes through foldField. TestFieldTables checks that each
// switch agrees with its table.

func envelopeField(key []byte) int {
	switch string(key) {
	case "kind":
		return 0
	case "output":
		return 1
	}
	return foldField(key, envelopeFields)
}

func outputField(key []byte) int {
	switch string(key) {
	case "participantId":
		return 0
	case "phase":
		return 1
	case "round":
		return 2
	case "fullResponse":
		return 3
	case "summary":
		return 4
	case "taskTitle":
		return 5
	case "extractedClaims":
		return 6
	case "judgements":
		return 7
	case "claimVotes":
		return 8
	case "selfScore":
		return 9
	case "respondedAt":
		return 10
	}
	return foldField(key, outputFields)
}

func claimField(key []byte) int {
	switch string(key) {
	case "title":
		return 0
	case "statement":
		return 1
	case "category":
		return 2
	case "claimId":
		return 3
	}
	return foldField(key, claimFields)
}

func judgementField(key []byte) int {
	switch string(key) {
	case "claimId":
		return 0
	case "stance":
		return 1
	case "confidence":
		return 2
	case "rationale":
		return 3
	case "revisedStatement":
		return 4
	case "mergesWith":
		return 5
	}
	return foldField(key, judgementFields)
}

func voteField(key []byte) int {
	switch string(key) {
	case "claimId":
		return 0
	case "vote":
		return 1
	case "reason":
		return 2
	}
	return foldField(key, voteFields)
}

// foldField matches key against names with encoding/json's case folding
// (its folded-name lookup is equivalent to bytes.EqualFold).
func foldField(key []byte, names [][]byte) int {
	for i, f := range names {
		if bytes.EqualFold(key, f) {
			return i
		}
	}
	return -1
}
