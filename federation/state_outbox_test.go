package federation

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

const (
	cmdOutPut  = concordv1.CommandType_COMMAND_TYPE_FED_OUTBOX_PUT
	cmdOutAck  = concordv1.CommandType_COMMAND_TYPE_FED_OUTBOX_ACK
	cmdMark    = concordv1.CommandType_COMMAND_TYPE_FED_INBOX_MARK
	cmdUnDone  = concordv1.CommandType_COMMAND_TYPE_FED_UNLINK_DONE
	cmdDirPart = concordv1.CommandType_COMMAND_TYPE_FED_DIRECTORY_CHUNK
)

func gEnv(payload string) *concordv1.FedEnvelope {
	return &concordv1.FedEnvelope{SourceSystem: "dc1", TargetSystem: "dc2", MessageId: payload, From: "a", ToAgent: "b", Payload: []byte(payload)}
}

func TestState_OutboxPutAck(t *testing.T) {
	small := link("dc2")
	small.Outbox = &concordv1.FedOutboxPolicy{MaxMessages: 3}
	tiny := link("dc2")
	tiny.Outbox = &concordv1.FedOutboxPolicy{MaxBytes: uint64(proto.Size(gEnv("x1"))) + 8}
	tests := []struct {
		name     string
		link     *concordv1.FedLink
		puts     int
		wantSeqs []uint64
		wantErr  error // on the put after wantSeqs
	}{
		{name: "numbered in order", link: link("dc2"), puts: 4, wantSeqs: []uint64{1, 2, 3, 4}},
		{name: "message bound", link: small, puts: 4, wantSeqs: []uint64{1, 2, 3}, wantErr: ErrOutboxFull},
		{name: "byte bound", link: tiny, puts: 2, wantSeqs: []uint64{1}, wantErr: ErrOutboxFull},
		{name: "no link", puts: 1, wantErr: ErrNoLink},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewState()
			if tt.link != nil {
				if err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: tt.link}); err != nil {
					t.Fatal(err)
				}
			}
			var seqs []uint64
			var lastErr error
			for i := range tt.puts {
				before := s.Snapshot()
				res, err := applyResult(t, s, cmdOutPut, &concordv1.FedOutboxPut{PeerSystemId: "dc2", Envelope: gEnv(fmt.Sprintf("x%d", i)), NowMs: 5})
				if err != nil {
					lastErr = err
					if !equalRecords(before, s.Snapshot()) {
						t.Fatal("a refused put changed the state")
					}
					continue
				}
				seqs = append(seqs, res.(uint64))
			}
			if !slices.Equal(seqs, tt.wantSeqs) || !errors.Is(lastErr, tt.wantErr) {
				t.Fatalf("seqs %v err %v, want %v %v", seqs, lastErr, tt.wantSeqs, tt.wantErr)
			}
		})
	}
}

func TestState_OutboxAckRemovesAndNotifies(t *testing.T) {
	s := NewState()
	if err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc2")}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := apply(t, s, cmdOutPut, &concordv1.FedOutboxPut{PeerSystemId: "dc2", Envelope: gEnv(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	var heard []uint64
	var ids []string
	s.OnAck(func(peer string, acked []Acked) {
		for _, a := range acked {
			heard = append(heard, a.Ack.GetSeq())
			ids = append(ids, a.MessageID)
		}
	})
	if err := apply(t, s, cmdOutAck, &concordv1.FedOutboxAck{PeerSystemId: "dc2", Acks: []*concordv1.FedAck{{Seq: 1}, {Seq: 3}, {Seq: 9}}}); err != nil {
		t.Fatal(err)
	}
	pending, floor := s.OutboxPending("dc2", 10, nil)
	var left []uint64
	for _, e := range pending {
		left = append(left, e.GetSeq())
		if e.GetEnvelope().GetGuaranteedSeq() != e.GetSeq() {
			t.Fatalf("entry %d carries guaranteed seq %d", e.GetSeq(), e.GetEnvelope().GetGuaranteedSeq())
		}
	}
	if !slices.Equal(left, []uint64{2, 4}) || floor != 2 || !slices.Equal(heard, []uint64{1, 3}) || !slices.Equal(ids, []string{"0", "2"}) {
		t.Fatalf("left %v floor %d heard %v %v", left, floor, heard, ids)
	}
	n, b := s.OutboxSize("dc2")
	want := uint64(0)
	for _, e := range pending {
		want += uint64(proto.Size(e.GetEnvelope()))
	}
	if n != 2 || b != want {
		t.Fatalf("size %d/%d, want 2/%d", n, b, want)
	}
	// Skipping in-flight ones, stopping at a held one; the outbox keeps
	// numbering after emptying.
	if got, _ := s.OutboxPending("dc2", 10, func(q uint64) (bool, bool) { return q != 2, false }); len(got) != 1 || got[0].GetSeq() != 4 {
		t.Fatalf("pending skipping 2: %v", got)
	}
	if got, _ := s.OutboxPending("dc2", 10, func(q uint64) (bool, bool) { return true, q == 4 }); len(got) != 1 || got[0].GetSeq() != 2 {
		t.Fatalf("pending stopping at 4: %v", got)
	}
	if err := apply(t, s, cmdOutAck, &concordv1.FedOutboxAck{PeerSystemId: "dc2", Acks: []*concordv1.FedAck{{Seq: 2}, {Seq: 4}}}); err != nil {
		t.Fatal(err)
	}
	if _, floor := s.OutboxPending("dc2", 10, nil); floor != 5 {
		t.Fatalf("empty outbox floor %d, want 5", floor)
	}
	if res, err := applyResult(t, s, cmdOutPut, &concordv1.FedOutboxPut{PeerSystemId: "dc2", Envelope: gEnv("y")}); err != nil || res.(uint64) != 5 {
		t.Fatalf("next seq %v %v, want 5", res, err)
	}
}

func TestState_InboxMark(t *testing.T) {
	tests := []struct {
		name      string
		marks     []*concordv1.FedInboxMark
		done, not []uint64
	}{
		{name: "in order advances the floor", marks: []*concordv1.FedInboxMark{{Seqs: []uint64{1, 2}}, {Seqs: []uint64{3}}},
			done: []uint64{1, 2, 3}, not: []uint64{4}},
		{name: "a gap is kept", marks: []*concordv1.FedInboxMark{{Seqs: []uint64{1, 3}}}, done: []uint64{1, 3}, not: []uint64{2, 4}},
		{name: "the source's floor closes a gap", marks: []*concordv1.FedInboxMark{{Seqs: []uint64{1, 3}}, {Seqs: []uint64{5}, Floor: 4}},
			done: []uint64{1, 2, 3, 5}, not: []uint64{6}},
		{name: "duplicates", marks: []*concordv1.FedInboxMark{{Seqs: []uint64{2, 2}}, {Seqs: []uint64{2}}}, done: []uint64{2}, not: []uint64{1, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewState()
			if err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc1")}); err != nil {
				t.Fatal(err)
			}
			for _, m := range tt.marks {
				m.SourceSystemId = "dc1"
				if err := apply(t, s, cmdMark, m); err != nil {
					t.Fatal(err)
				}
			}
			for _, q := range tt.done {
				if !s.InboxDone("dc1", q) {
					t.Fatalf("%d not done", q)
				}
			}
			for _, q := range tt.not {
				if s.InboxDone("dc1", q) {
					t.Fatalf("%d done", q)
				}
			}
		})
	}
	s := NewState()
	if err := apply(t, s, cmdMark, &concordv1.FedInboxMark{SourceSystemId: "dc1", Seqs: []uint64{1}}); !errors.Is(err, ErrNoLink) {
		t.Fatalf("mark without a link: %v", err)
	}
}

func TestState_InboxBounded(t *testing.T) {
	s := NewState()
	if err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc1")}); err != nil {
		t.Fatal(err)
	}
	seqs := make([]uint64, 0, maxInboxSeen+10)
	for i := range maxInboxSeen + 10 {
		seqs = append(seqs, uint64(2*i+10)) // never contiguous with the floor
	}
	if err := apply(t, s, cmdMark, &concordv1.FedInboxMark{SourceSystemId: "dc1", Seqs: seqs}); err != nil {
		t.Fatal(err)
	}
	for _, r := range s.Snapshot() {
		if in := r.GetInbox(); in != nil && len(in.GetSeen()) > maxInboxSeen {
			t.Fatalf("inbox keeps %d ids", len(in.GetSeen()))
		}
	}
	if !s.InboxDone("dc1", seqs[len(seqs)-1]) {
		t.Fatal("the newest id was dropped")
	}
}

func TestState_PendingUnlink(t *testing.T) {
	s := NewState()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc2")}))
	must(apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc3")}))
	must(apply(t, s, cmdOutPut, &concordv1.FedOutboxPut{PeerSystemId: "dc2", Envelope: gEnv("x")}))
	must(apply(t, s, cmdRm, &concordv1.FedLinkRemove{PeerSystemId: "dc2", NotifyPeer: true, NowMs: 7}))
	must(apply(t, s, cmdRm, &concordv1.FedLinkRemove{PeerSystemId: "dc3"}))
	p := s.PendingUnlinks()
	if len(p) != 1 || p[0].GetLink().GetPeerSystemId() != "dc2" || p[0].GetRemovedAtMs() != 7 {
		t.Fatalf("pending %v", p)
	}
	if n, _ := s.OutboxSize("dc2"); n != 0 {
		t.Fatal("the outbox outlived its link")
	}
	// A new link to the same peer drops the pending unlink of the old.
	must(apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc2")}))
	if len(s.PendingUnlinks()) != 0 {
		t.Fatal("relink kept the pending unlink")
	}
	must(apply(t, s, cmdRm, &concordv1.FedLinkRemove{PeerSystemId: "dc2", NotifyPeer: true}))
	must(apply(t, s, cmdUnDone, &concordv1.FedUnlinkDone{PeerSystemId: "dc2"}))
	must(apply(t, s, cmdUnDone, &concordv1.FedUnlinkDone{PeerSystemId: "dc2"})) // idempotent
	if len(s.PendingUnlinks()) != 0 {
		t.Fatal("unlink done kept the record")
	}
}

func chunk(version uint64, i uint32, more bool, ids ...string) *concordv1.FedDirectoryChunk {
	u := &concordv1.FedDirectoryApply{PeerSystemId: "dc2", Version: version, Full: true, Chunk: i, More: more, Digest: []byte{byte(version)}}
	for _, id := range ids {
		u.Upserts = append(u.Upserts, agent(id, "x"))
	}
	return &concordv1.FedDirectoryChunk{Update: u}
}

func TestState_DirectoryChunks(t *testing.T) {
	tests := []struct {
		name    string
		chunks  []*concordv1.FedDirectoryChunk
		wantErr error // of the last chunk
		want    []string
		version uint64
	}{
		{name: "assembled", chunks: []*concordv1.FedDirectoryChunk{chunk(5, 0, true, "a"), chunk(5, 1, true, "b"), chunk(5, 2, false, "c")},
			want: []string{"a", "b", "c"}, version: 5},
		{name: "single chunk", chunks: []*concordv1.FedDirectoryChunk{chunk(5, 0, false, "a")}, want: []string{"a"}, version: 5},
		{name: "staged until the last", chunks: []*concordv1.FedDirectoryChunk{chunk(5, 0, true, "a"), chunk(5, 1, true, "b")}},
		{name: "repeated chunks", chunks: []*concordv1.FedDirectoryChunk{chunk(5, 0, true, "a"), chunk(5, 0, true, "a"), chunk(5, 1, true, "b"),
			chunk(5, 1, true, "b"), chunk(5, 2, false, "c")}, want: []string{"a", "b", "c"}, version: 5},
		{name: "skipped chunk is a gap", chunks: []*concordv1.FedDirectoryChunk{chunk(5, 0, true, "a"), chunk(5, 2, false, "c")}, wantErr: ErrDirectoryGap},
		{name: "chunk of another version is a gap", chunks: []*concordv1.FedDirectoryChunk{chunk(5, 0, true, "a"), chunk(6, 1, false, "c")}, wantErr: ErrDirectoryGap},
		{name: "a newer first chunk restarts", chunks: []*concordv1.FedDirectoryChunk{chunk(5, 0, true, "a"), chunk(6, 0, true, "x"), chunk(6, 1, false, "y")},
			want: []string{"x", "y"}, version: 6},
		{name: "chunks of an applied version are stale", chunks: []*concordv1.FedDirectoryChunk{chunk(5, 0, false, "a"), chunk(5, 1, false, "b")},
			want: []string{"a"}, version: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewState()
			if err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc2")}); err != nil {
				t.Fatal(err)
			}
			var err error
			for _, c := range tt.chunks {
				err = apply(t, s, cmdDirPart, c)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			im := s.Imported("dc2")
			var got []string
			for _, a := range im.GetAgents() {
				got = append(got, a.GetId())
			}
			if !slices.Equal(got, tt.want) || im.GetVersion() != tt.version {
				t.Fatalf("imported %v v%d, want %v v%d", got, im.GetVersion(), tt.want, tt.version)
			}
			if tt.version != 0 && len(im.GetDigest()) != 1 {
				t.Fatalf("digest %x not stored", im.GetDigest())
			}
		})
	}
}

// TestState_SnapshotRoundTripGuaranteed covers the records of guaranteed
// delivery, pending unlinks and staged chunks.
func TestState_SnapshotRoundTripGuaranteed(t *testing.T) {
	s := NewState()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc2")}))
	must(apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc3")}))
	must(apply(t, s, cmdOutPut, &concordv1.FedOutboxPut{PeerSystemId: "dc2", Envelope: gEnv("x"), NowMs: 3}))
	must(apply(t, s, cmdOutPut, &concordv1.FedOutboxPut{PeerSystemId: "dc2", Envelope: gEnv("y"), NowMs: 4}))
	must(apply(t, s, cmdMark, &concordv1.FedInboxMark{SourceSystemId: "dc2", Seqs: []uint64{1, 4}}))
	must(apply(t, s, cmdDirPart, chunk(9, 0, true, "a")))
	must(apply(t, s, cmdRm, &concordv1.FedLinkRemove{PeerSystemId: "dc3", NotifyPeer: true, NowMs: 5}))

	fresh := roundTrip(t, s)
	kinds := map[string]bool{}
	for _, r := range fresh.Snapshot() {
		kinds[fmt.Sprintf("%T", r.GetRecord())] = true
	}
	for _, k := range []string{"*concordv1.FedSnapshotRecord_Outbox", "*concordv1.FedSnapshotRecord_Inbox",
		"*concordv1.FedSnapshotRecord_PendingUnlink", "*concordv1.FedSnapshotRecord_Staging"} {
		if !kinds[k] {
			t.Fatalf("no %s record in %v", k, kinds)
		}
	}
	// The restored state goes on where it was: the next seq, the inbox,
	// the staged chunks.
	if res, err := applyResult(t, fresh, cmdOutPut, &concordv1.FedOutboxPut{PeerSystemId: "dc2", Envelope: gEnv("z")}); err != nil || res.(uint64) != 3 {
		t.Fatalf("next seq after restore %v %v", res, err)
	}
	if !fresh.InboxDone("dc2", 4) || fresh.InboxDone("dc2", 2) {
		t.Fatal("inbox not restored")
	}
	must(apply(t, fresh, cmdDirPart, chunk(9, 1, false, "b")))
	if got := fresh.Imported("dc2").GetAgents(); len(got) != 2 {
		t.Fatalf("staged chunks not restored: %v", got)
	}
}

// TestState_StagingBounded: a peer that never sends its last chunk
// cannot grow the staged update past maxStagedBytes; the bound is the
// same after a snapshot restore.
func TestState_StagingBounded(t *testing.T) {
	s := NewState()
	if err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc2")}); err != nil {
		t.Fatal(err)
	}
	big := &concordv1.FedRemoteAgent{Id: "a", Description: string(make([]byte, 1<<20))}
	var err error
	var i uint32
	for ; err == nil && i < 100; i++ {
		c := chunk(5, i, true)
		c.Update.Upserts = []*concordv1.FedRemoteAgent{big}
		if i == 40 {
			if fresh := roundTrip(t, s); fresh.stagedBytes["dc2"] != s.stagedBytes["dc2"] {
				t.Fatalf("staged %d bytes after restore, %d before", fresh.stagedBytes["dc2"], s.stagedBytes["dc2"])
			}
		}
		err = apply(t, s, cmdDirPart, c)
	}
	if !errors.Is(err, ErrInvalidCommand) || int(i) > maxStagedBytes>>20+1 {
		t.Fatalf("after %d chunks of 1 MiB: %v", i, err)
	}
	if len(s.staging) != 0 || len(s.stagedBytes) != 0 {
		t.Fatal("the refused update stayed staged")
	}
}

// TestState_InboxGaps: the seqs of a range not recorded, bounded.
func TestState_InboxGaps(t *testing.T) {
	s := NewState()
	if err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc1")}); err != nil {
		t.Fatal(err)
	}
	if gaps, all := s.InboxGaps("dc1", 1, 4, 10); !slices.Equal(gaps, []uint64{1, 2, 3}) || !all {
		t.Fatalf("empty inbox: %v %v", gaps, all)
	}
	// Floor 3 (1 and 2 done), 5 and 7 recorded above it.
	if err := apply(t, s, cmdMark, &concordv1.FedInboxMark{SourceSystemId: "dc1", Seqs: []uint64{1, 2, 5, 7}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		from, to uint64
		limit    int
		want     []uint64
		all      bool
	}{
		{1, 9, 10, []uint64{3, 4, 6, 8}, true},
		{6, 9, 10, []uint64{6, 8}, true},
		{1, 9, 2, []uint64{3, 4}, false},
		{5, 6, 10, nil, true},
		{9, 3, 10, nil, true},
		{1, 1 << 62, 3, []uint64{3, 4, 6}, false}, // a far seq from a peer: bounded walk
	} {
		gaps, all := s.InboxGaps("dc1", tc.from, tc.to, tc.limit)
		if !slices.Equal(gaps, tc.want) || all != tc.all {
			t.Errorf("InboxGaps(%d, %d, %d) = %v %v, want %v %v", tc.from, tc.to, tc.limit, gaps, all, tc.want, tc.all)
		}
	}
}
