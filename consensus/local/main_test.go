package local_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The wall-clock driver starts goroutines; none may outlive a run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
