package clustertest

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/concordmap/concord/node"
)

// TestDiskFull_LeaderDiskFills: the leader's disk fills (a log write fault
// acting out ENOSPC). Its next append fails, it steps down, and another
// node leads: writes go on, acknowledged ones all survive. The full node's
// /v1/ready names the disk; when space returns it catches up and is ready
// again, and the replicas converge.
func TestDiskFull_LeaderDiskFills(t *testing.T) {
	var full [3]atomic.Bool
	c := New(t, 3, WithNodeConfig(func(i int, cfg *node.Config) {
		cfg.Raft.LogWriteFault = func() error {
			if full[i].Load() {
				return fmt.Errorf("write raft.db: %w", syscall.ENOSPC)
			}
			return nil
		}
	}))
	l := c.Leader(t)
	via := others(c.Running(), l)[0]
	cl := c.Connect(t, via.Index, map[string]any{"participantType": "system"})
	for i := range 3 {
		registerRetry(t, cl, fmt.Sprintf("before-%d", i), nil)
	}

	full[l.Index].Store(true)
	for i := range 5 {
		registerRetry(t, cl, fmt.Sprintf("during-%d", i), nil)
	}
	// A node that cannot append cannot stay leader.
	if nl := c.Leader(t); nl == l {
		t.Fatalf("%s still leads with a full disk", l)
	}
	Eventually(t, MembershipTimeout, func() error {
		code, body, err := httpGet(l.HTTPAddr, "/v1/ready")
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "disk full") {
			return fmt.Errorf("full node's /v1/ready: %d %s, want 503 naming the disk", code, body)
		}
		return nil
	})

	full[l.Index].Store(false)
	for i := range 3 {
		registerRetry(t, cl, fmt.Sprintf("after-%d", i), nil)
	}
	Eventually(t, MembershipTimeout, func() error {
		code, body, err := httpGet(l.HTTPAddr, "/v1/ready")
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("recovered node's /v1/ready: %d %s %v", code, body, err)
		}
		return nil
	})
	c.RequireInvariants(t)
}
