package federation

import (
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestState_LinkPolicies: the policies view holds what Link holds for
// them (and none of the addresses or CA), and a view taken before an
// update keeps reading the policies it was taken with while the state
// replaces them (run under -race: the state never writes a shared policy).
func TestState_LinkPolicies(t *testing.T) {
	s := NewState()
	l := link("dc2")
	l.PeerCaPem = []byte("-----BEGIN CERTIFICATE-----")
	l.Export, l.Transitive, l.MaxHops = coder, true, 4
	l.Outbox = &concordv1.FedOutboxPolicy{Guaranteed: true, MaxMessages: 9}
	if err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: l}); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.LinkPolicies("dc9"); ok {
		t.Fatal("a view of a link that does not exist")
	}
	full, _ := s.Link("dc2")
	view, ok := s.LinkPolicies("dc2")
	if !ok {
		t.Fatal("no view of dc2")
	}
	if len(view.GetPeerCaPem()) != 0 || len(view.GetPeerAddrs()) != 0 {
		t.Fatalf("the view carries the CA or addresses: %v", view)
	}
	for name, pair := range map[string][2]proto.Message{
		"export": {view.GetExport(), full.GetExport()}, "import": {view.GetImport(), full.GetImport()},
		"outbox": {view.GetOutbox(), full.GetOutbox()}, "buffer": {view.GetBuffer(), full.GetBuffer()},
	} {
		if !proto.Equal(pair[0], pair[1]) {
			t.Errorf("%s: view %v, link %v", name, pair[0], pair[1])
		}
	}
	if view.GetEpoch() != full.GetEpoch() || view.GetTransitive() != full.GetTransitive() || view.GetMaxHops() != full.GetMaxHops() ||
		view.GetPeerSystemId() != "dc2" || view.GetKind() != full.GetKind() {
		t.Fatalf("view %v differs from link %v", view, full)
	}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // updates racing the reader below
		defer wg.Done()
		for i := range 50 {
			next := link("dc2")
			next.Export = all
			_, _ = s.Apply(uint64(2*i+2), &concordv1.FedLinkAddrs{PeerSystemId: "dc2", Addrs: []string{strings.Repeat("a", i+1) + ":1"}})
			_, _ = s.Apply(uint64(2*i+3), &concordv1.FedLinkPut{Link: next})
		}
	}()
	for range 50 {
		if v, ok := s.LinkPolicies("dc2"); ok {
			_ = Matches(v.GetExport(), agentView(agent("bob", "coder")))
		}
	}
	wg.Wait()
	if !proto.Equal(view.GetExport(), coder) || !view.GetOutbox().GetGuaranteed() {
		t.Fatalf("an earlier view changed under the updates: %v", view)
	}
	if v, _ := s.LinkPolicies("dc2"); !proto.Equal(v.GetExport(), all) {
		t.Fatalf("the view after the updates has export %v, want all", v.GetExport())
	}
}

// BenchmarkState_LinkPolicies prices the per-batch read of the inbound
// stream beside State.Link's deep copy (a link with a 1.2 KB CA).
func BenchmarkState_LinkPolicies(b *testing.B) {
	s := NewState()
	l := link("dc2")
	l.PeerCaPem = []byte(strings.Repeat("x", 1200))
	if _, err := s.Apply(1, &concordv1.FedLinkPut{Link: l}); err != nil {
		b.Fatal(err)
	}
	b.Run("Link", func(b *testing.B) {
		for b.Loop() {
			_, _ = s.Link("dc2")
		}
	})
	b.Run("LinkPolicies", func(b *testing.B) {
		for b.Loop() {
			_, _ = s.LinkPolicies("dc2")
		}
	})
}
