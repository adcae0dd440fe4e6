package federation

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

const (
	cmdMapPut    = concordv1.CommandType_COMMAND_TYPE_FED_MAP_LINK_PUT
	cmdMapHolder = concordv1.CommandType_COMMAND_TYPE_FED_MAP_HOLDER
	cmdMapDir    = concordv1.CommandType_COMMAND_TYPE_FED_MAP_DIRECTORY
)

func mapLinkOf(peer, url string) *concordv1.FedLink {
	return &concordv1.FedLink{PeerSystemId: peer, Kind: concordv1.FedLinkKind_FED_LINK_KIND_MAP, Export: all, Import: all,
		Map: &concordv1.FedMapLink{Url: url, Auth: &concordv1.FedMapAuth{Method: "bearer", Token: "s3cret"}}}
}

func TestState_MapLinkPut(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(l *concordv1.FedLink)
		wantErr error
	}{
		{"valid", func(*concordv1.FedLink) {}, nil},
		{"wss", func(l *concordv1.FedLink) { l.Map.Url = "wss://example.test/map" }, nil},
		{"no auth", func(l *concordv1.FedLink) { l.Map.Auth = nil }, nil},
		{"http url", func(l *concordv1.FedLink) { l.Map.Url = "http://h/map" }, ErrInvalidCommand},
		{"no host", func(l *concordv1.FedLink) { l.Map.Url = "ws:///map" }, ErrInvalidCommand},
		{"bad system", func(l *concordv1.FedLink) { l.PeerSystemId = "a:b" }, ErrInvalidCommand},
		{"wrong kind", func(l *concordv1.FedLink) { l.Kind = concordv1.FedLinkKind_FED_LINK_KIND_CONCORD }, ErrInvalidCommand},
		{"peer addrs", func(l *concordv1.FedLink) { l.PeerAddrs = []string{"x:1"} }, ErrInvalidCommand},
		{"token without method", func(l *concordv1.FedLink) { l.Map.Auth.Method = "" }, ErrInvalidCommand},
		{"method without token", func(l *concordv1.FedLink) { l.Map.Auth.Token = "" }, ErrInvalidCommand},
		{"unknown method", func(l *concordv1.FedLink) { l.Map.Auth.Method = "basic" }, ErrInvalidCommand},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState()
			l := mapLinkOf("ext", "ws://127.0.0.1:1/map")
			tc.mutate(l)
			err := apply(t, s, cmdMapPut, &concordv1.FedMapLinkPut{Link: l})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if _, ok := s.Link("ext"); ok != (tc.wantErr == nil) && l.PeerSystemId == "ext" {
				t.Fatalf("link stored = %v after err %v", ok, err)
			}
		})
	}
}

func TestState_MapLinkKindsDoNotMix(t *testing.T) {
	s := NewState()
	if err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc2")}); err != nil {
		t.Fatal(err)
	}
	if err := apply(t, s, cmdMapPut, &concordv1.FedMapLinkPut{Link: mapLinkOf("dc2", "ws://h/map")}); !errors.Is(err, ErrInvalidCommand) {
		t.Fatalf("map link over a Concord link: %v", err)
	}
	if err := apply(t, s, cmdMapPut, &concordv1.FedMapLinkPut{Link: mapLinkOf("ext", "ws://h/map")}); err != nil {
		t.Fatal(err)
	}
	for name, cmd := range map[string]struct {
		typ concordv1.CommandType
		msg proto.Message
	}{
		"concord put":   {cmdPut, &concordv1.FedLinkPut{Link: link("ext")}},
		"addrs":         {cmdAddrs, &concordv1.FedLinkAddrs{PeerSystemId: "ext", Addrs: []string{"x:1"}}},
		"concord dir":   {cmdDir, &concordv1.FedDirectoryApply{PeerSystemId: "ext", Version: 9, Full: true}},
		"holder on dc2": {cmdMapHolder, &concordv1.FedMapHolder{PeerSystemId: "dc2", NodeId: "n1"}},
	} {
		err := apply(t, s, cmd.typ, cmd.msg)
		if err == nil {
			t.Fatalf("%s: applied across link kinds", name)
		}
	}
	if l, _ := s.Link("ext"); !IsMapLink(l) || len(l.GetPeerAddrs()) > 0 {
		t.Fatalf("map link changed: %v", l)
	}
}

func TestState_MapHolderAndDirectory(t *testing.T) {
	s := NewState()
	l := mapLinkOf("ext", "ws://h/map")
	l.Import = &concordv1.FedPolicy{Kind: concordv1.FedPolicyKind_FED_POLICY_KIND_NAME_GLOB, Value: "b*"}
	if err := apply(t, s, cmdMapPut, &concordv1.FedMapLinkPut{Link: l}); err != nil {
		t.Fatal(err)
	}
	// Compare-and-set on the epoch.
	if err := apply(t, s, cmdMapHolder, &concordv1.FedMapHolder{PeerSystemId: "ext", NodeId: "n1", PrevEpoch: 0}); err != nil {
		t.Fatal(err)
	}
	if err := apply(t, s, cmdMapHolder, &concordv1.FedMapHolder{PeerSystemId: "ext", NodeId: "n2", PrevEpoch: 0}); !errors.Is(err, ErrStaleHolder) {
		t.Fatalf("second holder on a stale epoch: %v", err)
	}
	got, _ := s.Link("ext")
	if got.GetMap().GetHolderNodeId() != "n1" || got.GetMap().GetHolderEpoch() != 1 {
		t.Fatalf("holder = %s/%d", got.GetMap().GetHolderNodeId(), got.GetMap().GetHolderEpoch())
	}
	dir := func(node string, epoch uint64, agents ...*concordv1.FedRemoteAgent) error {
		msg := &concordv1.FedMapDirectory{PeerSystemId: "ext", HolderNodeId: node, HolderEpoch: epoch, Agents: agents}
		return apply(t, s, cmdMapDir, msg)
	}
	if err := dir("n1", 1, agent("bob", ""), agent("alice", ""), agent("bert", "")); err != nil {
		t.Fatal(err)
	}
	if ids := importedIDs(s, "ext"); strings.Join(ids, ",") != "bert,bob" {
		t.Fatalf("imported %v, want bert,bob (import policy b*, sorted)", ids)
	}
	// Fenced: a stale holder, a bad agent, a duplicate change nothing.
	for name, err := range map[string]error{
		"stale node":  dir("n2", 1, agent("bob", "")),
		"stale epoch": dir("n1", 0, agent("bob", "")),
		"colon id":    dir("n1", 1, agent("b:x", "")),
		"empty id":    dir("n1", 1, agent("", "")),
		"duplicate":   dir("n1", 1, agent("bob", ""), agent("bob", "")),
		"long name":   dir("n1", 1, &concordv1.FedRemoteAgent{Id: "bob", Name: strings.Repeat("x", 2000)}),
	} {
		if err == nil {
			t.Fatalf("%s: applied", name)
		}
	}
	if ids := importedIDs(s, "ext"); strings.Join(ids, ",") != "bert,bob" {
		t.Fatalf("after refused updates: %v", ids)
	}
	// Replacing the link keeps the epoch sequence and drops the holder.
	if err := apply(t, s, cmdMapPut, &concordv1.FedMapLinkPut{Link: mapLinkOf("ext", "ws://h2/map")}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Link("ext")
	if got.GetMap().GetHolderNodeId() != "" || got.GetMap().GetHolderEpoch() != 1 {
		t.Fatalf("after replace: holder %q epoch %d", got.GetMap().GetHolderNodeId(), got.GetMap().GetHolderEpoch())
	}
	if err := dir("n1", 1, agent("bob", "")); !errors.Is(err, ErrStaleHolder) {
		t.Fatalf("old holder after replace: %v", err)
	}
	// Snapshot round trip keeps all of it.
	fresh := NewState()
	recs := s.Snapshot()
	i := 0
	commit, err := fresh.Restore(func() ([]byte, error) {
		if i == len(recs) {
			return nil, io.EOF
		}
		b, err := proto.Marshal(recs[i])
		i++
		return b, err
	})
	if err != nil {
		t.Fatal(err)
	}
	commit()
	if g, _ := fresh.Link("ext"); g.GetMap().GetUrl() != "ws://h2/map" || g.GetMap().GetAuth().GetToken() != "s3cret" {
		t.Fatalf("restored link %v", g)
	}
}

func importedIDs(s *State, peer string) []string {
	var ids []string
	for _, a := range s.Imported(peer).GetAgents() {
		ids = append(ids, a.GetId())
	}
	return ids
}

func TestRedaction(t *testing.T) {
	l := mapLinkOf("ext", "ws://u:p@h/map?key=v")
	r := Redacted(l)
	if r.GetMap().GetAuth().GetToken() != "" || l.GetMap().GetAuth().GetToken() != "s3cret" {
		t.Fatalf("Redacted must clear the copy's token only")
	}
	if got := RedactURL(l.GetMap().GetUrl()); strings.Contains(got, "p@") || strings.Contains(got, "key=v") {
		t.Fatalf("RedactURL = %s", got)
	}
}

func TestPairAnswer(t *testing.T) {
	now := time.Unix(1000, 0)
	open := []pairing{{foreignMsgID: "M1", correlationID: "task-1", at: now}, {foreignMsgID: "M2", correlationID: "task-2", at: now}}
	tests := []struct {
		name     string
		meta     string
		open     []pairing
		wantCID  string
		wantLeft int
	}{
		{"meta dropped: oldest request", ``, open, "task-1", 1},
		{"null meta", `null`, open, "task-1", 1},
		{"reply to the foreign id", `{"correlationId":"M2","isResult":true}`, open, "task-2", 1},
		{"unrelated correlation", `{"correlationId":"other"}`, open, "other", 2},
		{"nothing open", `{"x":1}`, nil, "", 0},
		{"expired", ``, []pairing{{foreignMsgID: "M", correlationID: "old", at: now.Add(-time.Hour)}}, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			meta, left := pairAnswer(json.RawMessage(tc.meta), append([]pairing(nil), tc.open...), now)
			var m struct {
				CorrelationID string `json:"correlationId"`
			}
			_ = json.Unmarshal(meta, &m)
			if m.CorrelationID != tc.wantCID || len(left) != tc.wantLeft {
				t.Fatalf("meta %s left %d, want cid %q left %d", meta, len(left), tc.wantCID, tc.wantLeft)
			}
		})
	}
}

func TestPickHolder(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	a := pickHolder("ext", nodes)
	if b := pickHolder("ext", []string{"n3", "n1", "n2"}); a != b {
		t.Fatalf("not deterministic: %s vs %s", a, b)
	}
	rest := []string{}
	for _, n := range nodes {
		if n != a {
			rest = append(rest, n)
		}
	}
	if c := pickHolder("ext", rest); c == a || c == "" {
		t.Fatalf("without %s the choice is %q", a, c)
	}
}
