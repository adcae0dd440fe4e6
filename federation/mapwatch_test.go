package federation

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// pagedForeign answers map/agents/list with pages of large but valid
// agents, as a hostile (or merely huge) foreign MAP server could.
type pagedForeign struct {
	fakeConn
	pages, perPage int
}

func (c *pagedForeign) Call(_ context.Context, method string, params any) (json.RawMessage, error) {
	if method != "map/agents/list" {
		return nil, &CodeError{Code: -32601, Message: "no"}
	}
	b, _ := json.Marshal(params)
	var p struct{ Cursor string }
	_ = json.Unmarshal(b, &p)
	page := 0
	_, _ = fmt.Sscanf(p.Cursor, "p%d", &page)
	long := strings.Repeat("x", maxForeignStrBytes)
	tags := make([]string, maxForeignTags)
	for i := range tags {
		tags[i] = long
	}
	type agent struct {
		ID, Name, Role, State, Description string
		Metadata                           map[string]any `json:"metadata"`
	}
	res := struct {
		Agents     []agent `json:"agents"`
		NextCursor string  `json:"nextCursor,omitempty"`
	}{}
	for i := range c.perPage {
		res.Agents = append(res.Agents, agent{ID: fmt.Sprintf("a-%d-%d", page, i), Name: long, Role: long, State: long,
			Description: long, Metadata: map[string]any{"tags": tags}})
	}
	if page+1 < c.pages {
		res.NextCursor = fmt.Sprintf("p%d", page+1)
	}
	return json.Marshal(res)
}

// TestMapWatch_DirectoryBytesBounded: what a foreign server lists becomes
// one Raft proposal (FedMapDirectory); valid agents of maximal size, many
// pages of them, must not make it larger than MaxForeignDirectoryBytes.
func TestMapWatch_DirectoryBytesBounded(t *testing.T) {
	p, _ := testProxy(t, all)
	conn := &pagedForeign{fakeConn: fakeConn{done: make(chan struct{})}, pages: 20, perPage: 25}
	agents, _, err := p.h.listForeign(context.Background(), conn)
	if err != nil {
		t.Fatal(err)
	}
	dir := &concordv1.FedMapDirectory{PeerSystemId: "sdk", Agents: agents}
	if n := proto.Size(dir); n > MaxForeignDirectoryBytes+1024 {
		t.Fatalf("directory proposal of %d bytes (%d agents), bound %d", n, len(agents), MaxForeignDirectoryBytes)
	}
	if len(agents) == 0 {
		t.Fatal("nothing imported: the bound must keep what fits")
	}
}

// mixedForeign lists valid agents among entries of the wrong shape.
type mixedForeign struct{ fakeConn }

func (c *mixedForeign) Call(_ context.Context, method string, _ any) (json.RawMessage, error) {
	if method != "map/agents/list" {
		return nil, &CodeError{Code: -32601, Message: "no"}
	}
	return json.RawMessage(`{"agents":[{"id":5},"bob",null,{"id":"ok-1","metadata":"x"},{"id":"bad:id"},{"id":"ok-2","name":["n"]},{"id":"ok-3"}]}`), nil
}

// TestMapWatch_BadEntriesDropped: an entry of the wrong shape is dropped
// and counted like an invalid one; it does not make the whole directory
// unreadable.
func TestMapWatch_BadEntriesDropped(t *testing.T) {
	p, _ := testProxy(t, all)
	agents, _, err := p.h.listForeign(context.Background(), &mixedForeign{fakeConn{done: make(chan struct{})}})
	if err != nil {
		t.Fatalf("one bad entry failed the listing: %v", err)
	}
	var ids []string
	for _, a := range agents {
		ids = append(ids, a.GetId())
	}
	if got := strings.Join(ids, ","); got != "ok-1,ok-3" {
		t.Fatalf("imported %q, want ok-1,ok-3", got)
	}
}

// rawForeign answers map/agents/list with fixed bytes.
type rawForeign struct {
	fakeConn
	page json.RawMessage
}

func (c *rawForeign) Call(context.Context, string, any) (json.RawMessage, error) { return c.page, nil }

// FuzzForeignListing feeds arbitrary answers of a foreign server to the
// directory reader and map/connect's parser: no panic, and whatever is
// imported is valid and within the bounds.
func FuzzForeignListing(f *testing.F) {
	for _, s := range []string{`{"agents":[{"id":"a"}]}`, `{"agents":[{"id":5},"x",null,{"id":"b:c"}],"nextCursor":7}`,
		`{"agents":{}}`, `[]`, `null`, `{"sessionId":"s","participantId":"p"}`, `{"agents":[{"id":"a","metadata":{"tags":["t",1]}}]}`} {
		f.Add([]byte(s))
	}
	p, _ := testProxy(f, all)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseConnect(json.RawMessage(b))
		agents, _, err := p.h.listForeign(context.Background(), &rawForeign{fakeConn: fakeConn{done: make(chan struct{})}, page: b})
		if err != nil {
			return
		}
		size := 0
		for _, a := range agents {
			if err := ValidForeignAgent(a); err != nil {
				t.Fatalf("%q imported an invalid agent: %v", b, err)
			}
			size += proto.Size(a)
		}
		if len(agents) > MaxForeignAgents || size > MaxForeignDirectoryBytes {
			t.Fatalf("%q: %d agents, %d bytes", b, len(agents), size)
		}
	})
}
