// Package proto holds Concord's .proto sources and the Go code generated from
// them (committed). Regenerate with `make proto`; `make proto-check` fails when
// the committed code differs from a fresh generation. This is the only
// hand-written Go file under proto/.
package proto
