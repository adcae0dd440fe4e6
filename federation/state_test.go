package federation

import (
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

var (
	all   = &concordv1.FedPolicy{Kind: concordv1.FedPolicyKind_FED_POLICY_KIND_ALL}
	none  = &concordv1.FedPolicy{Kind: concordv1.FedPolicyKind_FED_POLICY_KIND_NONE}
	coder = &concordv1.FedPolicy{Kind: concordv1.FedPolicyKind_FED_POLICY_KIND_ROLE, Value: "coder"}
)

func link(peer string) *concordv1.FedLink {
	return &concordv1.FedLink{PeerSystemId: peer, PeerAddrs: []string{"127.0.0.1:1"}, Export: all, Import: all}
}

func agent(id, role string) *concordv1.FedRemoteAgent {
	return &concordv1.FedRemoteAgent{Id: id, Role: role}
}

// apply runs one command through State.Apply as the FSM would: encoded and
// decoded, so the test also covers the body types Commands declares.
func apply(t *testing.T, s *State, typ concordv1.CommandType, msg proto.Message) error {
	t.Helper()
	_, err := applyResult(t, s, typ, msg)
	return err
}

// applyResult is apply with Apply's result value.
func applyResult(t *testing.T, s *State, typ concordv1.CommandType, msg proto.Message) (any, error) {
	t.Helper()
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	body := s.Commands()[typ]()
	if err := proto.Unmarshal(b, body); err != nil {
		t.Fatal(err)
	}
	return s.Apply(1, body)
}

const (
	cmdToken = concordv1.CommandType_COMMAND_TYPE_FED_TOKEN_CREATE
	cmdPut   = concordv1.CommandType_COMMAND_TYPE_FED_LINK_PUT
	cmdRm    = concordv1.CommandType_COMMAND_TYPE_FED_LINK_REMOVE
	cmdAddrs = concordv1.CommandType_COMMAND_TYPE_FED_LINK_ADDRS
	cmdDir   = concordv1.CommandType_COMMAND_TYPE_FED_DIRECTORY_APPLY
)

func TestState_TokenRedeem(t *testing.T) {
	hash := HashSecret([]byte("s"))
	tok := &concordv1.FedTokenRecord{PeerSystemId: "dc1", SecretHash: hash, ExpiresAtMs: 100, Export: coder, Import: none, Transitive: true,
		MaxHops: 2, Buffer: &concordv1.FedBufferPolicy{MaxMessages: 7}}
	tests := []struct {
		name   string
		peer   string
		hash   []byte
		now    int64
		reuse  bool
		want   error
		stored bool
	}{
		{name: "redeemed", peer: "dc1", hash: hash, now: 50, stored: true},
		{name: "unknown secret", peer: "dc1", hash: HashSecret([]byte("x")), now: 50, want: ErrTokenUnknown},
		{name: "expired", peer: "dc1", hash: hash, now: 100, want: ErrTokenExpired},
		{name: "other system", peer: "dc9", hash: hash, now: 50, want: ErrTokenPeer},
		{name: "reused", peer: "dc1", hash: hash, now: 50, reuse: true, want: ErrTokenUsed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewState()
			if err := apply(t, s, cmdToken, &concordv1.FedTokenCreate{Token: tok, CreatedAtMs: 1}); err != nil {
				t.Fatal(err)
			}
			if tt.reuse {
				if err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc1"), RedeemSecretHash: hash, NowMs: 10}); err != nil {
					t.Fatal(err)
				}
				if err := apply(t, s, cmdRm, &concordv1.FedLinkRemove{PeerSystemId: "dc1"}); err != nil {
					t.Fatal(err)
				}
			}
			before := s.Snapshot()
			err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link(tt.peer), RedeemSecretHash: tt.hash, NowMs: tt.now})
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if tt.want != nil {
				if !equalRecords(before, s.Snapshot()) {
					t.Fatal("a refused redemption changed the state")
				}
				return
			}
			l, ok := s.Link("dc1")
			if !ok || l.GetExport().GetKind() != coder.GetKind() || !l.GetTransitive() || l.GetImport().GetKind() != none.GetKind() ||
				l.GetMaxHops() != 2 || l.GetBuffer().GetMaxMessages() != 7 {
				t.Fatalf("link = %v; want the token's policies", l)
			}
			if tr, _ := s.TokenByHash(hash); !tr.GetUsed() {
				t.Fatal("token not marked used")
			}
		})
	}
}

func TestState_TokenCreatePrunesExpired(t *testing.T) {
	s := NewState()
	old := &concordv1.FedTokenRecord{PeerSystemId: "a", SecretHash: []byte{1}, ExpiresAtMs: 10}
	if err := apply(t, s, cmdToken, &concordv1.FedTokenCreate{Token: old, CreatedAtMs: 1}); err != nil {
		t.Fatal(err)
	}
	fresh := &concordv1.FedTokenRecord{PeerSystemId: "b", SecretHash: []byte{2}, ExpiresAtMs: 100}
	if err := apply(t, s, cmdToken, &concordv1.FedTokenCreate{Token: fresh, CreatedAtMs: 20}); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.TokenByHash([]byte{1}); ok {
		t.Fatal("expired token kept")
	}
	bad := &concordv1.FedTokenRecord{PeerSystemId: "c", SecretHash: []byte{3}, ExpiresAtMs: 5}
	if err := apply(t, s, cmdToken, &concordv1.FedTokenCreate{Token: bad, CreatedAtMs: 20}); !errors.Is(err, ErrInvalidCommand) {
		t.Fatalf("token expiring before creation: %v", err)
	}
}

func TestState_LinkCommands(t *testing.T) {
	s := NewState()
	if err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: &concordv1.FedLink{PeerSystemId: "bad:id", PeerAddrs: []string{"x"}}}); !errors.Is(err, ErrInvalidCommand) {
		t.Fatalf("bad id: %v", err)
	}
	if err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: &concordv1.FedLink{PeerSystemId: "dc2"}}); !errors.Is(err, ErrInvalidCommand) {
		t.Fatalf("no address: %v", err)
	}
	if err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc2")}); err != nil {
		t.Fatal(err)
	}
	if err := apply(t, s, cmdAddrs, &concordv1.FedLinkAddrs{PeerSystemId: "dc2", Addrs: []string{"b:1", "a:1"}}); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.Link("dc2"); len(l.GetPeerAddrs()) != 2 {
		t.Fatalf("addrs not refreshed: %v", l.GetPeerAddrs())
	}
	for _, tc := range []struct {
		typ concordv1.CommandType
		msg proto.Message
		err error
	}{
		{cmdAddrs, &concordv1.FedLinkAddrs{PeerSystemId: "dc2"}, ErrInvalidCommand},
		{cmdAddrs, &concordv1.FedLinkAddrs{PeerSystemId: "dc9", Addrs: []string{"x"}}, ErrNoLink},
		{cmdRm, &concordv1.FedLinkRemove{PeerSystemId: "dc9"}, ErrNoLink},
		{cmdDir, &concordv1.FedDirectoryApply{PeerSystemId: "dc9", Version: 1, Full: true}, ErrNoLink},
	} {
		if err := apply(t, s, tc.typ, tc.msg); !errors.Is(err, tc.err) {
			t.Fatalf("%s: err %v, want %v", tc.typ, err, tc.err)
		}
	}
	if err := apply(t, s, cmdDir, &concordv1.FedDirectoryApply{PeerSystemId: "dc2", Version: 3, Full: true, Upserts: []*concordv1.FedRemoteAgent{agent("bob", "")}}); err != nil {
		t.Fatal(err)
	}
	if err := apply(t, s, cmdRm, &concordv1.FedLinkRemove{PeerSystemId: "dc2"}); err != nil {
		t.Fatal(err)
	}
	if len(s.Links()) != 0 || len(s.Imported("dc2").GetAgents()) != 0 {
		t.Fatal("unlink left the link or its imported directory")
	}
}

func TestState_Directory(t *testing.T) {
	s := NewState()
	l := link("dc2")
	l.Import = coder // import filter
	if err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: l}); err != nil {
		t.Fatal(err)
	}
	ids := func() (out []string) {
		for _, a := range s.Imported("dc2").GetAgents() {
			out = append(out, a.GetId())
		}
		return out
	}
	steps := []struct {
		name string
		cmd  *concordv1.FedDirectoryApply
		err  error
		want []string
		ver  uint64
	}{
		{"full, import filter", &concordv1.FedDirectoryApply{Version: 5, Full: true,
			Upserts: []*concordv1.FedRemoteAgent{agent("c", "coder"), agent("a", "coder"), agent("x", "ops")}}, nil, []string{"a", "c"}, 5},
		{"delta", &concordv1.FedDirectoryApply{BaseVersion: 5, Version: 7,
			Upserts: []*concordv1.FedRemoteAgent{agent("b", "coder")}, Removes: []string{"a"}}, nil, []string{"b", "c"}, 7},
		{"role change drops it", &concordv1.FedDirectoryApply{BaseVersion: 7, Version: 8,
			Upserts: []*concordv1.FedRemoteAgent{agent("b", "ops")}}, nil, []string{"c"}, 8},
		{"gap", &concordv1.FedDirectoryApply{BaseVersion: 9, Version: 10}, ErrDirectoryGap, []string{"c"}, 8},
		{"stale", &concordv1.FedDirectoryApply{Version: 8, Full: true}, nil, []string{"c"}, 8},
		{"resync", &concordv1.FedDirectoryApply{Version: 12, Full: true, Upserts: []*concordv1.FedRemoteAgent{agent("z", "coder")}}, nil, []string{"z"}, 12},
		{"no id", &concordv1.FedDirectoryApply{Version: 13, Full: true, Upserts: []*concordv1.FedRemoteAgent{agent("", "coder")}}, ErrInvalidCommand, []string{"z"}, 12},
	}
	for _, st := range steps {
		st.cmd.PeerSystemId = "dc2"
		if err := apply(t, s, cmdDir, st.cmd); !errors.Is(err, st.err) {
			t.Fatalf("%s: err %v, want %v", st.name, err, st.err)
		}
		if got := ids(); !slices.Equal(got, st.want) || s.Imported("dc2").GetVersion() != st.ver {
			t.Fatalf("%s: imported %v at %d, want %v at %d", st.name, got, s.Imported("dc2").GetVersion(), st.want, st.ver)
		}
	}
	if a, ok := s.RemoteAgent("dc2", "z"); !ok || a.GetRole() != "coder" {
		t.Fatalf("RemoteAgent: %v %v", a, ok)
	}
}

func TestState_SnapshotRoundTrip(t *testing.T) {
	s := NewState()
	hash := HashSecret([]byte("s"))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(apply(t, s, cmdToken, &concordv1.FedTokenCreate{Token: &concordv1.FedTokenRecord{PeerSystemId: "dc3", SecretHash: hash, ExpiresAtMs: 100}, CreatedAtMs: 1}))
	must(apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc2")}))
	must(apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc3"), RedeemSecretHash: hash, NowMs: 2}))
	must(apply(t, s, cmdDir, &concordv1.FedDirectoryApply{PeerSystemId: "dc2", Version: 4, Full: true, Upserts: []*concordv1.FedRemoteAgent{agent("bob", "x")}}))
	must(apply(t, s, concordv1.CommandType_COMMAND_TYPE_FED_GATEWAY_BIND, &concordv1.FedGatewayBind{Binding: &concordv1.FedGatewayBinding{SystemId: "lab", SessionId: "S1"}}))

	fresh := roundTrip(t, s)
	if _, err := fresh.Restore(func() ([]byte, error) { return []byte{0xff, 0xff}, nil }); err == nil {
		t.Fatal("garbage record restored")
	}
}

func equalRecords(a, b []*concordv1.FedSnapshotRecord) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// roundTrip persists s's snapshot and restores it into a new State,
// checking that the commit signals a change and the states are equal.
func roundTrip(t *testing.T, s *State) *State {
	t.Helper()
	var recs [][]byte
	if err := PersistSnapshot(s.Snapshot(), func(b []byte) error { recs = append(recs, b); return nil }); err != nil {
		t.Fatal(err)
	}
	fresh := NewState()
	i := 0
	commit, err := fresh.Restore(func() ([]byte, error) {
		if i == len(recs) {
			return nil, io.EOF
		}
		i++
		return recs[i-1], nil
	})
	if err != nil {
		t.Fatal(err)
	}
	changed := fresh.Changed()
	commit()
	select {
	case <-changed:
	default:
		t.Fatal("restore did not signal a change")
	}
	if !equalRecords(s.Snapshot(), fresh.Snapshot()) {
		t.Fatal("restored state differs")
	}
	return fresh
}
