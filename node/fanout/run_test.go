package fanout

import "testing"

// TestStep_NoSubscriptionsReadsNothing: with no subscription on the node,
// a write's events are neither read from the log nor encoded.
func TestStep_NoSubscriptionsReadsNothing(t *testing.T) {
	reg := newFakeRegistry(100)
	h, err := New(testConfig(reg, &fakeProposer{reg: reg}))
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		reg.appendEvent("agent_state_changed", "a1")
	}
	h.step()
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.cache.evs); n != 0 {
		t.Fatalf("%d events prepared for no subscription", n)
	}
}
