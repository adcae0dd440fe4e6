package rpc

import (
	"errors"
	"maps"
	"strconv"
	"time"
)

// Error is a JSON-RPC 2.0 / MAP error object: {code, message, data?}.
// A Handler returns one (as its error) to send exactly this object to the
// peer; Call returns one when the peer answered with an error. An *Error is
// immutable once it has been returned or sent: the With* methods copy.
type Error struct {
	Code    int        `json:"code"`
	Message string     `json:"message"`
	Data    *ErrorData `json:"data,omitempty"`
}

// ErrorData is MAPErrorData. Retryable is always serialized because MAP policy
// (map-protocol.md §6) is to always tell the client.
type ErrorData struct {
	Category     string         `json:"category,omitempty"` // protocol|auth|routing|agent|resource|federation|mail|internal
	Retryable    bool           `json:"retryable"`
	RetryAfterMs int64          `json:"retryAfterMs,omitempty"`
	Details      map[string]any `json:"details,omitempty"`
}

// Error implements error.
func (e *Error) Error() string {
	return "rpc error " + strconv.Itoa(e.Code) + ": " + e.Message
}

// NewError returns an error with data.category and data.retryable filled from
// the §6 code table. An empty message is replaced by the table's default text.
func NewError(code int, message string) *Error {
	ci := classify(code)
	if message == "" {
		message = ci.message
	}
	return &Error{Code: code, Message: message, Data: &ErrorData{Category: ci.category, Retryable: ci.retryable}}
}

// InvalidParams returns a -32602 error whose message names the offending field
// and whose details are {field, reason}.
func InvalidParams(field, reason string) *Error {
	msg := "Invalid params"
	if field != "" {
		msg += ": " + field
	}
	if reason != "" {
		msg += ": " + reason
	}
	return NewError(CodeInvalidParams, msg).WithDetails(map[string]any{"field": field, "reason": reason})
}

// WithDetails returns a copy of e whose data.details holds e's details merged
// with kv (kv wins on equal keys). e itself is not modified, so package-level
// *Error values can be shared safely.
func (e *Error) WithDetails(kv map[string]any) *Error {
	c := e.clone()
	if c.Data.Details == nil {
		c.Data.Details = make(map[string]any, len(kv))
	}
	maps.Copy(c.Data.Details, kv)
	return c
}

// WithRetryAfter returns a copy of e marked retryable after d (rounded up to
// whole milliseconds), as RATE_LIMITED wants.
func (e *Error) WithRetryAfter(d time.Duration) *Error {
	c := e.clone()
	c.Data.Retryable = true
	c.Data.RetryAfterMs = int64((d + time.Millisecond - 1) / time.Millisecond)
	return c
}

// clone copies e deeply enough that the copy's Data and Details can be edited.
func (e *Error) clone() *Error {
	c := *e
	if e.Data == nil {
		ci := classify(e.Code)
		c.Data = &ErrorData{Category: ci.category, Retryable: ci.retryable}
	} else {
		d := *e.Data
		d.Details = maps.Clone(e.Data.Details)
		c.Data = &d
	}
	return &c
}

// IsCode reports whether err is (or wraps) an *Error with the given code.
func IsCode(err error, code int) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// internalError is what the peer sees for a non-*Error handler error or a
// panic: the real cause is logged, never leaked.
func internalError() *Error { return NewError(CodeInternal, "Internal error") }
