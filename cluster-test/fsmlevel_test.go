package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/raftstore"
)

// recordedLevel is the system FSM level node n's replica holds.
func recordedLevel(n *Node) int {
	st, ok := n.Server().Registry().(*registry.State)
	if !ok {
		return -1
	}
	return st.SystemFSMLevel()
}

// TestFSMLevel_DowngradeInPlaceRefused: three servers of this build
// record the system FSM level in replicated state (the leader proposes it
// once every server advertises it; concord operator health shows it).
// One is then restarted as a build of the level below (injected with
// registry.Config.BuildFSMLevel): replaying the log it meets the record,
// halts its FSM instead of applying entries differently from the others,
// fails to start with the cause, answers /v1/ready 503 naming it, and
// closes Fatal (concord server exits non-zero on it). The other two go on
// taking writes.
func TestFSMLevel_DowngradeInPlaceRefused(t *testing.T) {
	older := atomic.Int32{} // 1 + the index of the node restarted as the older build
	c := New(t, 3, WithNodeConfig(func(i int, cfg *node.Config) {
		if int(older.Load()) == i+1 {
			cfg.Registry.BuildFSMLevel = registry.FSMLevelSystemRecord - 1
		}
	}))
	Eventually(t, MembershipTimeout, func() error {
		for _, n := range c.Running() {
			if got := recordedLevel(n); got != registry.FSMLevel {
				return fmt.Errorf("%s records system FSM level %d, want %d", n, got, registry.FSMLevel)
			}
		}
		return nil
	})
	l := c.Leader(t)
	Eventually(t, MembershipTimeout, func() error {
		h, err := operatorHealth(l)
		if err != nil {
			return err
		}
		if int(h.GetSystemFsmLevel()) != registry.FSMLevel {
			return fmt.Errorf("health reports system FSM level %d, want %d", h.GetSystemFsmLevel(), registry.FSMLevel)
		}
		return nil
	})
	d := others(c.Running(), l)[0]
	c.Stop(t, d.Index)
	older.Store(int32(d.Index + 1))
	ctx, cancel := context.WithTimeout(context.Background(), NodeReadyTimeout)
	defer cancel()
	err := c.start(ctx, d)
	if !errors.Is(err, raftstore.ErrHalt) || !errors.Is(err, registry.ErrFSMLevelAhead) {
		t.Fatalf("start of a build below the system's FSM level: %v, want a halt naming the level", err)
	}
	select {
	case <-d.Server().Fatal():
	default:
		t.Fatal("Fatal not closed on the halted node")
	}
	web := &http.Client{Timeout: CallTimeout, Transport: &http.Transport{TLSClientConfig: ClientTLS()}}
	defer web.CloseIdleConnections()
	resp, err := web.Get(d.Server().HTTPURL() + "/v1/ready")
	if err != nil {
		t.Fatalf("ready of %s: %v", d, err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "halted") {
		t.Fatalf("ready of the halted %s: %d %s", d, resp.StatusCode, body)
	}
	cl := c.Connect(t, l.Index, map[string]any{"participantType": "system"})
	registerRetry(t, cl, "after-downgrade", nil)
}
