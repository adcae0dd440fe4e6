package cluster

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/concordmap/concord/node/membership"
)

func TestDirectory(t *testing.T) {
	fm := newFakeMembers()
	fm.set(membership.Member{ID: "self", NodeMeta: membership.NodeMeta{GRPCAddr: "s:1"}})
	fm.set(membership.Member{ID: "a", NodeMeta: membership.NodeMeta{GRPCAddr: "a:1"}})
	fm.set(membership.Member{ID: "d", Status: membership.StatusDead, NodeMeta: membership.NodeMeta{GRPCAddr: "d:1"}})
	fm.set(membership.Member{ID: "noaddr"})
	d, err := NewDirectory(testConfig(t, "self"), fm)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		id    string
		addr  string
		ok    bool
		alive bool
	}{
		{"a", "a:1", true, true},
		{"self", "s:1", true, true},
		{"d", "", false, false},
		{"noaddr", "", false, true},
		{"unknown", "", false, false},
	}
	for _, tc := range tests {
		addr, ok := d.GRPCAddr(tc.id)
		if addr != tc.addr || ok != tc.ok || d.Alive(tc.id) != tc.alive {
			t.Errorf("%s: GRPCAddr = %q, %v; Alive = %v; want %q, %v, %v", tc.id, addr, ok, d.Alive(tc.id), tc.addr, tc.ok, tc.alive)
		}
	}
	if got := d.Peers(); !slices.Equal(got, []string{"a", "noaddr"}) {
		t.Fatalf("Peers = %v", got)
	}

	changed := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, changed) }()
	fm.setStatus("d", membership.StatusAlive)
	changed <- struct{}{}
	eventually(t, waitTimeout, func() error {
		if _, ok := d.GRPCAddr("d"); !ok {
			return errors.New("d not alive yet")
		}
		return nil
	})
	close(changed) // a closed channel must not spin the loop
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if _, err := NewDirectory(testConfig(t, "self"), nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("NewDirectory(nil) = %v", err)
	}
}
