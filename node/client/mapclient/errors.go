package mapclient

import "errors"

var (
	// ErrInvalidConfig wraps every Config.Validate failure.
	ErrInvalidConfig = errors.New("mapclient: invalid config")
	// ErrClosed is returned by calls made after Close, or while Close runs.
	ErrClosed = errors.New("mapclient: client closed")
	// ErrConnectionLost is returned by a call whose connection dropped while
	// it was in flight; the server may or may not have processed it.
	ErrConnectionLost = errors.New("mapclient: connection lost during call")
	// ErrUnreachable is returned by Dial, and recorded by the supervisor, when
	// no URL accepted a connection within the allotted time.
	ErrUnreachable = errors.New("mapclient: no server reachable")
	// ErrBadResponse is returned when a server answer cannot be decoded.
	ErrBadResponse = errors.New("mapclient: malformed server response")
)
