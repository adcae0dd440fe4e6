package federation

import (
	"errors"
	"testing"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// applyAt applies msg as the Raft entry at index (apply uses index 1).
func applyAt(t *testing.T, s *State, index uint64, msg *concordv1.FedInboxMark) error {
	t.Helper()
	_, err := s.Apply(index, msg)
	return err
}

// relinkAt stores a link to peer as the Raft entry at index, with an
// epoch set by the proposer that the state must not keep.
func relinkAt(t *testing.T, s *State, index uint64, peer string) {
	t.Helper()
	l := link(peer)
	l.Epoch = 999
	if _, err := s.Apply(index, &concordv1.FedLinkPut{Link: l}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Link(peer); got.GetEpoch() != index {
		t.Fatalf("link to %s stored at %d has epoch %d", peer, index, got.GetEpoch())
	}
}

// TestState_InboxMarkEpoch: a mark made for a link that was unlinked and
// linked again (retried after its commit failed) does not enter the new
// link's inbox; a mark naming the new link does, and one without an epoch
// (an older binary's entry) applies to the link there, as before.
func TestState_InboxMarkEpoch(t *testing.T) {
	s := NewState()
	relinkAt(t, s, 3, "dc1")
	if err := applyAt(t, s, 4, &concordv1.FedInboxMark{SourceSystemId: "dc1", Seqs: []uint64{1}, LinkEpoch: 3}); err != nil || !s.InboxDone("dc1", 1) {
		t.Fatalf("mark of the current link: %v", err)
	}
	if _, err := s.Apply(5, &concordv1.FedLinkRemove{PeerSystemId: "dc1"}); err != nil {
		t.Fatal(err)
	}
	relinkAt(t, s, 6, "dc1")

	retried := &concordv1.FedInboxMark{SourceSystemId: "dc1", Seqs: []uint64{2, 3}, Floor: 2, LinkEpoch: 3}
	if err := applyAt(t, s, 7, retried); !errors.Is(err, ErrNoLink) {
		t.Fatalf("old link's mark after a relink: %v", err)
	}
	for q := uint64(1); q <= 3; q++ {
		if s.InboxDone("dc1", q) {
			t.Fatalf("seq %d of the old link is done in the new link's inbox", q)
		}
	}
	if err := applyAt(t, s, 8, &concordv1.FedInboxMark{SourceSystemId: "dc1", Seqs: []uint64{1}, LinkEpoch: 6}); err != nil || !s.InboxDone("dc1", 1) {
		t.Fatalf("mark of the new link: %v", err)
	}
	if err := applyAt(t, s, 9, &concordv1.FedInboxMark{SourceSystemId: "dc1", Seqs: []uint64{2}}); err != nil || !s.InboxDone("dc1", 2) {
		t.Fatalf("mark without an epoch: %v", err)
	}
	if _, err := s.Apply(10, &concordv1.FedLinkRemove{PeerSystemId: "dc1"}); err != nil {
		t.Fatal(err)
	}
	if err := applyAt(t, s, 11, &concordv1.FedInboxMark{SourceSystemId: "dc1", Seqs: []uint64{3}, LinkEpoch: 6}); !errors.Is(err, ErrNoLink) {
		t.Fatalf("mark after the unlink: %v", err)
	}
}

// TestState_LinkEpochKept: updating a stored link (its addresses) keeps
// its epoch, which a snapshot carries; a map link never has one.
func TestState_LinkEpochKept(t *testing.T) {
	s := NewState()
	relinkAt(t, s, 4, "dc2")
	if _, err := s.Apply(5, &concordv1.FedLinkAddrs{PeerSystemId: "dc2", Addrs: []string{"127.0.0.1:2"}}); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.Link("dc2"); l.GetEpoch() != 4 || l.GetPeerAddrs()[0] != "127.0.0.1:2" {
		t.Fatalf("after an address update: %v", l)
	}
	if l, _ := roundTrip(t, s).Link("dc2"); l.GetEpoch() != 4 {
		t.Fatalf("after a snapshot restore the epoch is %d", l.GetEpoch())
	}
	ml := mapLinkOf("ext", "ws://example.test/map")
	ml.Epoch = 7
	if _, err := s.Apply(6, &concordv1.FedMapLinkPut{Link: ml}); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.Link("ext"); l.GetEpoch() != 0 {
		t.Fatalf("map link stored with epoch %d", l.GetEpoch())
	}
}
