package membership

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// startCluster starts the nodes ids in the given order; every node's
// JoinAddrs lists every node (itself included), as in a real deployment,
// so early nodes retry until later ones come up.
func startCluster(t *testing.T, ids []string, order []int, tweak func(*Config)) []*Membership {
	t.Helper()
	ports := reservePorts(t, len(ids))
	addrs := make([]string, len(ids))
	for i, p := range ports {
		addrs[i] = addrOf(p)
	}
	nodes := make([]*Membership, len(ids))
	for _, i := range order {
		cfg := testConfig(t, ids[i])
		cfg.BindPort = ports[i]
		cfg.JoinAddrs = addrs
		if tweak != nil {
			tweak(&cfg)
		}
		nodes[i] = startReserved(t, cfg)
	}
	return nodes
}

func TestMembership_JoinConvergesInAnyStartOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 7))
	for _, n := range []int{3, 5} {
		for range 2 {
			order := r.Perm(n)
			t.Run(fmt.Sprintf("n=%d/order=%v", n, order), func(t *testing.T) {
				ids := nodeIDs(n)
				nodes := startCluster(t, ids, order, nil)
				for _, m := range nodes {
					eventually(t, 10*time.Second, func() error { return seesAlive(m, ids) })
				}
				for _, m := range nodes {
					select {
					case <-m.Joined():
					default:
						t.Errorf("%s: Joined not closed although it sees all members", m.cfg.NodeID)
					}
				}
			})
		}
	}
}

func TestMembership_MetaRoundTrip(t *testing.T) {
	a := mustStart(t, testConfig(t, "a"))
	cfgB := testConfig(t, "b")
	cfgB.Meta = NodeMeta{
		HTTPAddr: "10.1.2.3:7700",
		GRPCAddr: "node-b.example:7701",
		RaftAddr: "[fd00::b]:7702",
		Version:  "v1.2.3+abc",
		Role:     RoleServer,
	}
	cfgB.BootstrapExpect = 3
	cfgB.JoinAddrs = []string{a.LocalMember().GossipAddr}
	b := mustStart(t, cfgB)

	want := b.LocalMember()
	if want.GossipAddr == "" || want.Status != StatusAlive {
		t.Fatalf("local member not populated after Start: %+v", want)
	}
	eventually(t, 5*time.Second, func() error {
		for _, mem := range a.Members() {
			if mem.ID == "b" {
				if mem != want {
					return fmt.Errorf("a sees %+v, want %+v", mem, want)
				}
				return nil
			}
		}
		return errors.New("a does not see b yet")
	})
	got := b.LocalMember()
	if got.NodeMeta != cfgB.Meta || got.BootstrapExpect != 3 || got.SystemID != "sys-a" {
		t.Fatalf("local member %+v does not carry the configured meta", got)
	}
}

func TestMembership_IgnoresOtherSystem(t *testing.T) {
	a := mustStart(t, testConfig(t, "a"))
	seed := []string{a.LocalMember().GossipAddr}
	cfgB := testConfig(t, "b")
	cfgB.JoinAddrs = seed
	b := mustStart(t, cfgB)

	cfgX := testConfig(t, "x")
	cfgX.SystemID = "sys-b"
	cfgX.JoinAddrs = seed
	x := mustStart(t, cfgX)

	eventually(t, 5*time.Second, func() error { return seesAlive(b, []string{"a", "b"}) })
	consistently(t, scaled(time.Second), func() error {
		for _, m := range []*Membership{a, b} {
			if err := seesAlive(m, []string{"a", "b"}); err != nil {
				return err
			}
		}
		if err := seesAlive(x, []string{"x"}); err != nil {
			return err
		}
		select {
		case <-x.Joined():
			return errors.New("node of another system reports joined")
		default:
			return nil
		}
	})
}

func TestMembership_GracefulLeaveMarksLeft(t *testing.T) {
	ids := nodeIDs(3)
	nodes := startCluster(t, ids, []int{0, 1, 2}, nil)
	for _, m := range nodes {
		eventually(t, 5*time.Second, func() error { return seesAlive(m, ids) })
	}
	subs := []*Subscription{nodes[0].Subscribe(), nodes[1].Subscribe()}
	for _, s := range subs {
		defer s.Close()
	}

	leaver := nodes[2]
	if err := leaver.Leave(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if err := leaver.Leave(ctxTimeout(t, time.Second)); !errors.Is(err, ErrLeft) {
		t.Fatalf("second Leave = %v, want ErrLeft", err)
	}
	if err := leaver.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for i, m := range nodes[:2] {
		eventually(t, 5*time.Second, func() error {
			if st := statusOf(m, ids[2]); st != StatusLeft {
				return fmt.Errorf("%s sees %s as %v, want left", ids[i], ids[2], st)
			}
			return nil
		})
		requireEvent(t, subs[i], ids[2], EventLeave)
	}
}

func TestMembership_ShutdownWithoutLeaveMarksDead(t *testing.T) {
	ids := nodeIDs(3)
	nodes := startCluster(t, ids, []int{2, 0, 1}, nil)
	for _, m := range nodes {
		eventually(t, 5*time.Second, func() error { return seesAlive(m, ids) })
	}
	sub := nodes[0].Subscribe()
	defer sub.Close()

	if err := nodes[1].Shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2} {
		eventually(t, 10*time.Second, func() error {
			if st := statusOf(nodes[i], ids[1]); st != StatusDead {
				return fmt.Errorf("%s sees %s as %v, want dead", ids[i], ids[1], st)
			}
			return nil
		})
	}
	requireEvent(t, sub, ids[1], EventFail)
}

// requireEvent drains s until it holds an event of kind for member id.
func requireEvent(t *testing.T, s *Subscription, id string, kind EventKind) {
	t.Helper()
	var seen []string
	eventually(t, 5*time.Second, func() error {
		for _, ev := range s.Drain() {
			seen = append(seen, ev.Kind.String()+":"+ev.Member.ID)
			if ev.Member.ID == id && ev.Kind == kind {
				return nil
			}
		}
		return fmt.Errorf("no %v event for %s; saw %v", kind, id, seen)
	})
}

func TestMembership_GossipKeyMismatchPreventsJoin(t *testing.T) {
	tests := []struct {
		name      string
		joinerKey []byte
	}{
		{"different key", otherKey},
		{"plaintext joiner", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := mustStart(t, testConfig(t, "a"))
			cfg := testConfig(t, "b")
			cfg.GossipKey = tc.joinerKey
			cfg.AllowPlaintext = tc.joinerKey == nil
			cfg.JoinAddrs = []string{a.LocalMember().GossipAddr}
			b := mustStart(t, cfg)
			consistently(t, scaled(time.Second), func() error {
				if err := seesAlive(a, []string{"a"}); err != nil {
					return err
				}
				if err := seesAlive(b, []string{"b"}); err != nil {
					return err
				}
				select {
				case <-b.Joined():
					return errors.New("joined despite a key mismatch")
				default:
					return nil
				}
			})
			// The joiner gives up with an error that names the problem.
			select {
			case <-b.Fatal():
			case <-time.After(scaled(5 * time.Second)):
				t.Fatal("the joiner did not give up on the key mismatch")
			}
			err := b.FatalErr()
			if !errors.Is(err, ErrGossipKey) || !strings.Contains(err.Error(), "cannot decrypt") ||
				!strings.Contains(err.Error(), a.LocalMember().GossipAddr) {
				t.Fatalf("FatalErr = %v, want ErrGossipKey naming the seed", err)
			}
			if tc.joinerKey != nil && !strings.Contains(err.Error(), KeyFingerprint(tc.joinerKey)) {
				t.Fatalf("FatalErr = %v, want it to name the key %s", err, KeyFingerprint(tc.joinerKey))
			}
			if strings.Contains(err.Error(), base64.StdEncoding.EncodeToString(otherKey)) {
				t.Fatal("the error reveals the key")
			}
		})
	}
}

// A seed that is down is not a key mismatch: the join loop keeps trying.
func TestMembership_UnreachableSeedIsNotFatal(t *testing.T) {
	cfg := testConfig(t, "b")
	cfg.JoinAddrs = []string{addrOf(reservePorts(t, 1)[0])}
	b := mustStart(t, cfg)
	consistently(t, scaled(time.Second), func() error {
		select {
		case <-b.Fatal():
			return fmt.Errorf("gave up: %v", b.FatalErr())
		default:
			return nil
		}
	})
}

func TestMembership_JoinRetriesUntilSeedStarts(t *testing.T) {
	seedPort := reservePorts(t, 1)[0]
	cfgB := testConfig(t, "b")
	cfgB.JoinAddrs = []string{addrOf(seedPort)}
	b := mustStart(t, cfgB)

	// The seed is not up yet, so b's first attempts must fail.
	consistently(t, 300*time.Millisecond, func() error {
		select {
		case <-b.Joined():
			return errors.New("joined before the seed started")
		default:
			return nil
		}
	})
	cfgA := testConfig(t, "a")
	cfgA.BindPort = seedPort
	a := mustStart(t, cfgA)

	select {
	case <-b.Joined():
	case <-time.After(scaled(5 * time.Second)):
		t.Fatal("b did not join after the seed started")
	}
	for _, m := range []*Membership{a, b} {
		eventually(t, 5*time.Second, func() error { return seesAlive(m, []string{"a", "b"}) })
	}
}

func TestMembership_Lifecycle(t *testing.T) {
	m, err := New(testConfig(t, "a"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := m.Leave(ctx); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("Leave before Start = %v, want ErrNotStarted", err)
	}
	if _, err := m.WaitBootstrapExpect(ctx); !errors.Is(err, ErrBootstrapDisabled) {
		t.Fatalf("WaitBootstrapExpect without expect = %v, want ErrBootstrapDisabled", err)
	}
	sub := m.Subscribe()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	requireEvent(t, sub, "a", EventJoin)
	if err := m.Start(ctx); !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("second Start = %v, want ErrAlreadyStarted", err)
	}
	select {
	case <-m.Joined():
	default:
		t.Fatal("Joined must be closed at Start when there is nothing to join")
	}
	for range 2 {
		if err := m.Shutdown(); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	}
	for range sub.Changed() { // drain the pending signal; ends when closed
	}
	if err := m.Start(ctx); !errors.Is(err, ErrShutdown) {
		t.Fatalf("Start after Shutdown = %v, want ErrShutdown", err)
	}
	if err := m.Leave(ctx); !errors.Is(err, ErrShutdown) {
		t.Fatalf("Leave after Shutdown = %v, want ErrShutdown", err)
	}
	if _, ok := <-m.Subscribe().Changed(); ok {
		t.Fatal("Subscribe after Shutdown must return a closed subscription")
	}
}

func TestMembership_ShutdownBeforeStart(t *testing.T) {
	m, err := New(testConfig(t, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if got := m.Members(); len(got) != 0 {
		t.Fatalf("Members before Start = %v, want none", got)
	}
	if !slices.Equal([]string{m.LocalMember().ID}, []string{"a"}) {
		t.Fatal("LocalMember before Start must describe the configured node")
	}
}

// A node whose reserved port another process took before it bound it
// starts on another port instead of failing the test.
func TestStartReserved_TakenPortFallsBackToAFreeOne(t *testing.T) {
	port := reservePorts(t, 1)[0]
	ln, err := net.Listen("tcp", addrOf(port)) // the other process
	if err != nil {
		t.Fatalf("take the reserved port: %v", err)
	}
	defer ln.Close()
	cfg := testConfig(t, "a")
	cfg.BindPort = port
	m := startReserved(t, cfg)
	if got := m.LocalMember().GossipAddr; got == addrOf(port) {
		t.Fatalf("gossips on the taken port %s", got)
	}
}
