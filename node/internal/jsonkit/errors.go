package jsonkit

import "errors"

// ErrMalformed reports input that is not a walkable JSON object.
var ErrMalformed = errors.New("jsonkit: malformed JSON")
