package fanout

import "errors"

// Sentinel errors of package fanout. Compare with errors.Is. Errors for MAP
// clients are *rpc.Error values (params.go, replay.go).
var (
	// ErrInvalidConfig wraps every Config.Validate failure.
	ErrInvalidConfig = errors.New("fanout: invalid config")

	// ErrUnknownSession is returned by Attach (and wrapped in the errors of
	// Subscribe) when the registry has no such session.
	ErrUnknownSession = errors.New("fanout: unknown session")
)
