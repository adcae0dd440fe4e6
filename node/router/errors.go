package router

import "errors"

// Sentinel errors of package router. Compare with errors.Is. Errors that go
// back to a MAP client are *rpc.Error values built in resolve.go and
// params.go; these sentinels are for Go callers.
var (
	// ErrInvalidConfig wraps every Config.Validate failure.
	ErrInvalidConfig = errors.New("router: invalid config")

	// ErrNotConnected is returned by DeliverLocal when the recipient has no
	// live connection on this node (it detached or moved).
	ErrNotConnected = errors.New("router: recipient not connected to this node")

	// ErrBadEnvelope is returned by DeliverLocal for an envelope without a
	// message or without a recipient.
	ErrBadEnvelope = errors.New("router: malformed envelope")
)
