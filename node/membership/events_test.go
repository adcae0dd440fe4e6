package membership

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// newUnstarted returns a Membership that is never started: enough to drive
// its delegate hooks by hand.
func newUnstarted(t *testing.T) *Membership {
	t.Helper()
	m, err := New(testConfig(t, "local"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown() })
	return m
}

func mlNode(w wireMeta) *memberlist.Node {
	return &memberlist.Node{Name: w.nodeID, Addr: net.IPv4(127, 0, 0, 1), Port: 7946, Meta: encodeMeta(w)}
}

func peerWire(id string) wireMeta {
	w := validWire()
	w.nodeID, w.systemID = id, "sys-a"
	return w
}

func TestObserve_EventKindsAndStatus(t *testing.T) {
	m := newUnstarted(t)
	sub := m.Subscribe()
	defer sub.Close()
	d := delegate{m: m}

	base := peerWire("p1")
	updated := base
	updated.meta.Version = "v2.0.0"
	booted := updated
	booted.bootstrapped = true
	leaving := booted
	leaving.leaving = true

	steps := []struct {
		name   string
		call   func()
		kind   EventKind // 0: no event expected
		status Status
	}{
		{"join", func() { d.NotifyJoin(mlNode(base)) }, EventJoin, StatusAlive},
		{"meta update", func() { d.NotifyUpdate(mlNode(updated)) }, EventUpdate, StatusAlive},
		{"same meta again", func() { d.NotifyUpdate(mlNode(updated)) }, 0, StatusAlive},
		{"bootstrapped", func() { d.NotifyUpdate(mlNode(booted)) }, EventUpdate, StatusAlive},
		{"leaving flag only", func() { d.NotifyUpdate(mlNode(leaving)) }, 0, StatusAlive},
		{"graceful leave", func() { d.NotifyLeave(mlNode(leaving)) }, EventLeave, StatusLeft},
		{"rejoin", func() { d.NotifyJoin(mlNode(base)) }, EventJoin, StatusAlive},
		{"failure", func() { d.NotifyLeave(mlNode(base)) }, EventFail, StatusDead},
	}
	for _, st := range steps {
		st.call()
		evs := sub.Drain()
		switch {
		case st.kind == 0 && len(evs) != 0:
			t.Fatalf("%s: unexpected events %+v", st.name, evs)
		case st.kind != 0 && (len(evs) != 1 || evs[0].Kind != st.kind):
			t.Fatalf("%s: events %+v, want one %v", st.name, evs, st.kind)
		}
		if got := statusOf(m, "p1"); got != st.status {
			t.Fatalf("%s: status %v, want %v", st.name, got, st.status)
		}
	}
}

func TestSubscription_CoalescesWithoutBlocking(t *testing.T) {
	m := newUnstarted(t)
	sub := m.Subscribe()
	d := delegate{m: m}

	// Nobody drains: the hooks must still return at once.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 1000 {
			w := peerWire("p1")
			w.meta.Version = "v" + string(rune('a'+i%26))
			d.NotifyUpdate(mlNode(w))
			d.NotifyJoin(mlNode(peerWire("p2")))
		}
		d.NotifyLeave(mlNode(peerWire("p2")))
	}()
	select {
	case <-done:
	case <-time.After(scaled(5 * time.Second)):
		t.Fatal("delegate hooks blocked on an undrained subscription")
	}
	<-sub.Changed()
	evs := sub.Drain()
	if len(evs) != 2 || evs[0].Member.ID != "p1" || evs[1].Member.ID != "p2" {
		t.Fatalf("want one coalesced event per member ordered by id, got %+v", evs)
	}
	if evs[1].Kind != EventFail {
		t.Fatalf("p2's latest change was a failure, got %v", evs[1].Kind)
	}
	if again := sub.Drain(); again != nil {
		t.Fatalf("second Drain returned %+v", again)
	}
	sub.Close()
	sub.Close()
	d.NotifyJoin(mlNode(peerWire("p3"))) // publishing after Close must not panic
	if _, ok := <-sub.Changed(); ok {
		t.Fatal("Changed not closed by Close")
	}
}

func TestDelegate_FiltersPeers(t *testing.T) {
	m := newUnstarted(t)
	d := delegate{m: m}
	foreign := peerWire("x1")
	foreign.systemID = "sys-b"
	renamed := mlNode(peerWire("p1"))
	renamed.Name = "impostor"

	tests := []struct {
		name string
		node *memberlist.Node
		want error // nil: admitted
	}{
		{"same system", mlNode(peerWire("p1")), nil},
		{"other system", mlNode(foreign), ErrForeignSystem},
		{"garbage meta", &memberlist.Node{Name: "g", Meta: []byte("\x01garbage\xff")}, ErrInvalidMeta},
		{"no meta", &memberlist.Node{Name: "g"}, ErrInvalidMeta},
		{"name differs from meta", renamed, ErrInvalidMeta},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := d.NotifyAlive(tc.node)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("NotifyAlive = %v, want %v", err, tc.want)
			}
			d.NotifyJoin(tc.node) // rejected nodes must not become members
			if admitted := statusOf(m, tc.node.Name) != 0; admitted != (tc.want == nil) {
				t.Fatalf("member recorded = %v, want %v", admitted, tc.want == nil)
			}
		})
	}

	garbage := &memberlist.Node{Name: "g", Meta: []byte{9}}
	if err := d.NotifyMerge([]*memberlist.Node{mlNode(peerWire("p1")), garbage}); err != nil {
		t.Fatalf("merge with a garbage peer = %v; NotifyAlive drops that peer, the merge may proceed", err)
	}
	if err := d.NotifyMerge([]*memberlist.Node{mlNode(peerWire("p1")), mlNode(foreign)}); !errors.Is(err, ErrForeignSystem) {
		t.Fatalf("merge with a foreign peer = %v, want ErrForeignSystem", err)
	}
}

func TestMembership_ReapsOldDepartures(t *testing.T) {
	cfg := testConfig(t, "local")
	cfg.DeadMemberRetention = 50 * time.Millisecond
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	d := delegate{m: m}
	d.NotifyJoin(mlNode(peerWire("p1")))
	d.NotifyJoin(mlNode(peerWire("p2")))
	d.NotifyLeave(mlNode(peerWire("p2")))
	eventually(t, 10*time.Second, func() error { // the deadline of a failure, not a speed: roomy for a loaded machine
		if st := statusOf(m, "p2"); st != 0 {
			return errors.New("p2 still listed as " + st.String())
		}
		return nil
	})
	if statusOf(m, "p1") != StatusAlive {
		t.Fatal("an alive member must never be reaped")
	}
}
