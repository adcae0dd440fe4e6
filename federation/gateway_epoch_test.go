package federation

import (
	"context"
	"errors"
	"sync"
	"testing"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// sessionEpochs is a fake SessionEpochs: the sessions that exist, by id,
// with their attach epoch.
type sessionEpochs struct {
	mu sync.Mutex
	at map[string]uint64
}

func (s *sessionEpochs) SessionEpoch(id string) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ep, ok := s.at[id]
	return ep, ok
}

func (s *sessionEpochs) set(id string, ep uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at[id] = ep
}

// newEpochFixture is a gateway fixture whose state checks session epochs
// against sessions and whose manager quotes them when quote is true.
func newEpochFixture(t *testing.T, quote bool) (*gwFixture, *sessionEpochs) {
	t.Helper()
	f := newGWFixture(t, func(context.Context) error { return nil })
	sessions := &sessionEpochs{at: map[string]uint64{"S1": 2}}
	f.st.WithSessions(sessions)
	f.m.deps.QuoteSessionEpochs = func(context.Context) bool { return quote }
	return f, sessions
}

// TestGateway_RouteFromMovedSessionRefused: a route from a gateway
// connection whose session has left the attach epoch it holds (resumed
// elsewhere since) binds nothing and delivers nothing; it is answered
// with the retryable 4000 of a moved session (reason session_moved), as
// node/mapsvc answers the registry's writes. The connection now holding
// the session binds; and while some server does not enforce the epochs
// nothing is quoted (the old behaviour).
func TestGateway_RouteFromMovedSessionRefused(t *testing.T) {
	f, _ := newEpochFixture(t, true)
	stale, current := labGateway, labGateway
	stale.SessionEpoch, current.SessionEpoch = 1, 2
	_, cerr := f.route(t, stale, sdkEnvelope("lab", "dc1", 0, "", "", `{"agent":"bob"}`))
	if cerr == nil || cerr.Code != CodeSessionMoved || cerr.Data["reason"] != ReasonSessionMoved {
		t.Fatalf("route from the stale connection: %+v, want %d with reason %s", cerr, CodeSessionMoved, ReasonSessionMoved)
	}
	// Refused before proposing: this replica shows the session moved on.
	if _, ok := f.st.Gateway("lab"); ok || len(f.toAgents) != 0 || f.store.proposed() != 0 {
		t.Fatalf("refused route: bound %v, delivered to %v, %d proposed", ok, f.toAgents, f.store.proposed())
	}
	// Should the move reach this replica only after the bind was proposed,
	// the apply refuses it the same way.
	if _, err := f.st.Apply(1, &concordv1.FedGatewayBind{SessionEpoch: 1,
		Binding: &concordv1.FedGatewayBinding{SystemId: "lab", SessionId: "S1"}}); !errors.Is(err, ErrSessionMoved) {
		t.Fatalf("apply of the stale bind: %v, want ErrSessionMoved", err)
	}
	if _, cerr := f.route(t, current, sdkEnvelope("lab", "dc1", 0, "", "", `{"agent":"bob"}`)); cerr != nil {
		t.Fatalf("route from the current connection: %+v", cerr)
	}
	if b, ok := f.st.Gateway("lab"); !ok || b.GetSessionId() != "S1" {
		t.Fatalf("binding after the current connection routed: %v %v", b, ok)
	}

	old, _ := newEpochFixture(t, false)
	if _, cerr := old.route(t, stale, sdkEnvelope("lab", "dc1", 0, "", "", `{"agent":"bob"}`)); cerr != nil {
		t.Fatalf("route without quoted epochs: %+v", cerr)
	}
}

// TestGateway_ReleaseKeepsResumedSession: the leader's unbind quotes the
// epoch at which it saw the gateway's session end; should the session be
// attached again before the unbind commits, the binding stays.
func TestGateway_ReleaseKeepsResumedSession(t *testing.T) {
	f, sessions := newEpochFixture(t, true)
	if _, cerr := f.route(t, GatewayCaller{SessionID: "S1", SessionEpoch: 2, Sources: []string{"lab"}, Targets: []string{"dc1"}},
		sdkEnvelope("lab", "dc1", 0, "", "", `{"agent":"bob"}`)); cerr != nil {
		t.Fatalf("route: %+v", cerr)
	}
	// The leader reads the session closed at epoch 3, and the gateway
	// resumes it (epoch 4) before the unbind applies.
	f.m.deps.SessionLive = func(id string) (uint64, bool) {
		sessions.set(id, 4)
		return 3, false
	}
	f.m.releaseGateways(context.Background())
	if b, ok := f.st.Gateway("lab"); !ok || b.GetSessionId() != "S1" {
		t.Fatalf("binding of the resumed session dropped: %v %v", b, ok)
	}
	// Closed for good at epoch 5: the unbind quoting it applies.
	f.m.deps.SessionLive = func(id string) (uint64, bool) {
		sessions.set(id, 5)
		return 5, false
	}
	f.m.releaseGateways(context.Background())
	if _, ok := f.st.Gateway("lab"); ok {
		t.Fatal("binding of the ended session kept")
	}
}
