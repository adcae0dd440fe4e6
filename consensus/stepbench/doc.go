// Package stepbench holds a copy of consensus's Step throughput benchmark
// (issue 3: a 5-agent, 200-claim, 3-round run) in a test binary of its own.
//
// consensus's own test binary keeps about 2 MB live that has nothing to do
// with Step (about half of it the tables the property-test library builds
// at init).
// With the runtime's 4 MB minimum heap goal that leaves 2 MB between
// collections instead of about 4 MB, so the in-package benchmark pays for
// 40 % more collection cycles per run than a process whose live heap is
// small, and on a small heap each cycle costs more than its marking (the
// scavenger returns pages that the next cycles fault back in). This binary
// links only consensus and the standard library, so its figure is Step's
// cost without that test-binary overhead; the in-package benchmark stays
// the reference next to its JSON baseline. The package has no non-test code.
package stepbench
