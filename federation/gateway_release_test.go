package federation

import (
	"context"
	"slices"
	"sync"
	"testing"
)

// TestGateway_ReleasedWhenItsSessionEnds: while the gateway's session
// lives the leader keeps its binding; once it ends the binding goes, a
// reply to its system answers 5001 instead of the retryable 5000, and a
// follower proposes nothing.
func TestGateway_ReleasedWhenItsSessionEnds(t *testing.T) {
	f := newGWFixture(t, func(context.Context) error { return nil })
	var mu sync.Mutex
	live := map[string]bool{"S1": true}
	f.m.deps.SessionLive = func(id string) (uint64, bool) { mu.Lock(); defer mu.Unlock(); return 0, live[id] }
	if _, cerr := f.route(t, labGateway, sdkEnvelope("lab", "dc1", 0, "", "", `{"agent":"bob"}`)); cerr != nil {
		t.Fatalf("route: %s", cerr.Message)
	}
	if _, cerr := f.route(t, labGateway, sdkEnvelope("lab", "dc1", 0, "", "", `{"agent":"nobody"}`)); cerr == nil || cerr.Code != CodeAgentNotFound {
		t.Fatalf("route to nobody: %+v", cerr)
	}
	send := func() Outcome {
		out := make(chan Outcome, 1)
		f.m.Send(Message{TargetSystem: "lab", ToAgent: "alice", MessageID: "r", From: "bob"}, func(o Outcome) { out <- o })
		return <-out
	}
	f.m.releaseGateways(context.Background())
	if o := send(); o.Err != nil || !slices.Equal(f.toSession, []string{"S1"}) {
		t.Fatalf("live gateway: outcome %+v, sessions %v", o, f.toSession)
	}

	mu.Lock()
	delete(live, "S1")
	mu.Unlock()
	follower := f.m.deps.IsLeader
	f.m.deps.IsLeader = func() bool { return false }
	n := f.store.proposed()
	f.m.releaseGateways(context.Background())
	if f.store.proposed() != n {
		t.Fatal("a follower proposed an unbind")
	}
	f.m.deps.IsLeader = follower
	f.m.releaseGateways(context.Background())
	if _, ok := f.st.Gateway("lab"); ok {
		t.Fatal("binding of an ended session kept")
	}
	if o := send(); o.Err == nil || o.Err.Code != CodeSystemNotFound {
		t.Fatalf("after the gateway left: outcome %+v, want 5001", o)
	}
	st := f.m.GatewayStats()
	if st.RoutedIn != 1 || st.RoutedOut != 1 || st.Unbound != 1 || st.Refused[CodeAgentNotFound] != 1 || len(st.Refused) != 1 {
		t.Fatalf("stats %+v", st)
	}
}
