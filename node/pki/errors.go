package pki

import "errors"

var (
	// ErrNoIdentity is returned by IdentityOf when a certificate carries no
	// concord:// URI SAN.
	ErrNoIdentity = errors.New("pki: certificate has no concord:// identity")
	// ErrBadName is returned when a system id, node id or operator name is
	// empty or has characters outside [A-Za-z0-9_-].
	ErrBadName = errors.New("pki: invalid name")
	// ErrExists is returned by WriteFiles when a file it would write exists:
	// an operator's CA key is never overwritten by accident.
	ErrExists = errors.New("pki: file exists")
)
