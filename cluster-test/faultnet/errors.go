package faultnet

import (
	"errors"
	"os"
)

var (
	// ErrUnreachable is returned by a dial whose target stayed unreachable
	// under the current rules until the dial's deadline.
	ErrUnreachable = errors.New("faultnet: unreachable")

	// ErrClosed is returned by reads and writes on a connection after Close
	// (its own or the Network's DropConns) while they were blocked by a
	// cut.
	ErrClosed = errors.New("faultnet: connection closed")
)

// timeoutError is returned when a blocked read or write reaches its
// deadline. It is a net.Error with Timeout() true, like the one a real
// socket returns, and matches os.ErrDeadlineExceeded.
type timeoutError struct{}

func (timeoutError) Error() string   { return "faultnet: i/o timeout (blackholed)" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// Is makes errors.Is(err, os.ErrDeadlineExceeded) true, as for a socket.
func (timeoutError) Is(target error) bool { return target == os.ErrDeadlineExceeded }
