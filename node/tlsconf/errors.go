package tlsconf

import "errors"

var (
	// ErrInvalidConfig is returned by New for a Config that cannot work.
	ErrInvalidConfig = errors.New("tlsconf: invalid config")
	// ErrPeerRefused wraps every reason a peer certificate is refused:
	// none presented, expired, wrong CA, wrong system, role or node.
	ErrPeerRefused = errors.New("tlsconf: peer certificate refused")
)
