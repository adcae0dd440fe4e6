package clustertest

import (
	"os"
	"strconv"
	"time"
)

// timeoutScale multiplies every bound below; set CONCORD_TEST_TIMEOUT_SCALE
// (a positive float, e.g. 3) on slow CI machines.
var timeoutScale = func() float64 {
	if v, err := strconv.ParseFloat(os.Getenv("CONCORD_TEST_TIMEOUT_SCALE"), 64); err == nil && v > 0 {
		return v
	}
	return 1
}()

// scaled applies the timeout scale.
func scaled(d time.Duration) time.Duration { return time.Duration(float64(d) * timeoutScale) }

// Every wait of the harness and the scenarios is bounded by one of these.
var (
	// FormTimeout bounds forming a cluster: all n nodes started and ready.
	FormTimeout = scaled(30 * time.Second)
	// NodeReadyTimeout is node.Config.ReadyTimeout: one Start (restart, join).
	NodeReadyTimeout = scaled(20 * time.Second)
	// LeaderTimeout bounds Leader: one stable leader agreed by all.
	LeaderTimeout = scaled(10 * time.Second)
	// ConvergeTimeout bounds RequireConverged and WaitApplied.
	ConvergeTimeout = scaled(15 * time.Second)
	// MembershipTimeout bounds Raft configuration changes driven by gossip
	// (join, leave, dead-server cleanup).
	MembershipTimeout = scaled(20 * time.Second)
	// ShutdownTimeout bounds one node's graceful shutdown; the Close
	// watchdog dumps goroutines when it passes.
	ShutdownTimeout = scaled(15 * time.Second)
	// KillBudget is the context a Kill gives Shutdown: already isolated, the
	// node has nobody to say goodbye to, so anything slower is a hang.
	KillBudget = scaled(1 * time.Second)
	// CallTimeout bounds one MAP request.
	CallTimeout = scaled(10 * time.Second)
	// DeliveryTimeout bounds waiting for notifications to arrive.
	DeliveryTimeout = scaled(10 * time.Second)
	// UnavailableBound is how fast a node cut off from the leader must
	// answer a write with a retryable error (issue 4: "within a bounded
	// time"): FastConfig's forward retry budget (1 s) plus a follower's
	// heartbeat timeout (<= 400 ms), one gRPC dial (500 ms) and slack.
	UnavailableBound = scaled(3 * time.Second)
	// BuildTimeout bounds `go build` of the concord binary.
	BuildTimeout = scaled(5 * time.Minute)
	// ProcReadyTimeout bounds a process until /v1/ready answers 200.
	ProcReadyTimeout = scaled(30 * time.Second)
	// ProcStopTimeout bounds a SIGTERM'd process before it gets SIGKILL.
	ProcStopTimeout = scaled(15 * time.Second)
)

// PollInterval is how often Eventually re-checks.
const PollInterval = 25 * time.Millisecond
