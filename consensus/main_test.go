package consensus

import (
	"testing"

	"go.uber.org/goleak"
)

// The reducer starts no goroutine; neither may a simulated run or a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
