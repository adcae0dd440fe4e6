package federation

import "errors"

// MAP error codes of map-protocol.md §6 that federation answers with.
const (
	CodeAgentNotFound   = 2001
	CodeScopeNotFound   = 2002
	CodeUnavailable     = 5000 // FEDERATION_UNAVAILABLE: link down, buffer refused
	CodeSystemNotFound  = 5001 // FEDERATION_SYSTEM_NOT_FOUND: no link
	CodeAuthFailed      = 5002 // FEDERATION_AUTH_FAILED
	CodeNotExported     = 5003 // not exported to the asking system
	CodeLoopDetected    = 5010
	CodeMaxHopsExceeded = 5011
	CodeInvalidParams   = -32602
	CodeDeliveryFailed  = 2003
	// CodeSessionMoved is MAP's retryable 4000 with details.reason
	// ReasonSessionMoved: a gateway's route whose binding was refused
	// because its connection no longer holds its session (ErrSessionMoved),
	// as node/mapsvc answers the registry's writes refused alike.
	CodeSessionMoved = 4000
)

// ReasonSessionMoved is details.reason of CodeSessionMoved (the same as
// node/mapsvc.ReasonSessionMoved).
const ReasonSessionMoved = "session_moved"

// Sentinels returned by State's Apply and by the token codec.
var (
	// ErrInvalidConfig: a Config or Manager dependency is missing or wrong.
	ErrInvalidConfig = errors.New("federation: invalid config")
	// ErrInvalidCommand: a command is malformed (missing peer id, ...).
	ErrInvalidCommand = errors.New("federation: invalid command")
	// ErrTokenUnknown: no token with that secret was issued (or it expired
	// and was pruned).
	ErrTokenUnknown = errors.New("federation: unknown peering token")
	// ErrTokenUsed: the token was redeemed already; tokens are one-time.
	ErrTokenUsed = errors.New("federation: peering token already used")
	// ErrTokenExpired: the token's expiry has passed.
	ErrTokenExpired = errors.New("federation: peering token expired")
	// ErrTokenPeer: the token was issued for another system id.
	ErrTokenPeer = errors.New("federation: peering token issued for another system")
	// ErrBadToken: a token string does not decode.
	ErrBadToken = errors.New("federation: malformed peering token")
	// ErrNoLink: no link to the named system.
	ErrNoLink = errors.New("federation: no link to system")
	// ErrDirectoryGap: a directory delta does not start at the stored
	// version; the importer asks for a full update.
	ErrDirectoryGap = errors.New("federation: directory delta after a gap")
	// ErrSelfLink: a system cannot link to itself.
	ErrSelfLink = errors.New("federation: cannot link a system to itself")
	// ErrTLSRequired: a link outside dev mode needs TLS material.
	ErrTLSRequired = errors.New("federation: links need TLS outside --dev")
	// ErrStaleHolder: a map link's holder command names a holder (or an
	// epoch) that is no longer current.
	ErrStaleHolder = errors.New("federation: map link holder changed")
	// ErrOutboxFull: a link's replicated outbox of guaranteed messages is
	// at its message or byte bound.
	ErrOutboxFull = errors.New("federation: guaranteed outbox full")
	// ErrClosed: the manager is shut down.
	ErrClosed = errors.New("federation: closed")
	// ErrSessionMoved: a gateway bind quoted an attach epoch its session
	// has left (resumed elsewhere, detached, closed, gone), or an unbind
	// one its session was attached again since.
	ErrSessionMoved = errors.New("federation: gateway session moved on")
)

// CodeError is a refusal with a MAP error code, as it crosses a link in a
// FedAck and reaches map/send's caller.
type CodeError struct {
	Code    int
	Message string
	Data    map[string]any
}

func (e *CodeError) Error() string { return e.Message }

func codeErr(code int, msg string, data map[string]any) *CodeError {
	return &CodeError{Code: code, Message: msg, Data: data}
}
