package argueclient

import "errors"

var (
	// ErrInvalidRequest is returned when the flags and --input do not make a
	// valid start request (wraps the *consensus.ValidationError).
	ErrInvalidRequest = errors.New("argueclient: invalid run request")
	// ErrRunFailed is returned (wrapped) by Run, RunLocal and Watch when the
	// run ended failed: the caller exits non-zero.
	ErrRunFailed = errors.New("argueclient: run failed")
	// ErrRunCancelled is returned (wrapped) when the run was cancelled.
	ErrRunCancelled = errors.New("argueclient: run cancelled")
	// ErrBadResponse is returned when a server answer cannot be decoded.
	ErrBadResponse = errors.New("argueclient: malformed server response")
)
