// Package jsonscan walks JSON objects that are already known to be valid
// without a full decode: it splits an object into its raw members, so
// callers can pick out a few keys or drop one member without building a map
// or re-encoding the rest.
//
// It does not validate. The rpc layer has checked every inbound frame, and
// the other inputs (events the registry or the router produced) are JSON the
// node wrote itself, so a second validating pass would only cost time. It
// still never panics: input it cannot walk is reported as ErrMalformed (or
// ok == false), because tests and internal callers can hand it anything.
package jsonscan
