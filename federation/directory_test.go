package federation

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

func TestChunkDirectory(t *testing.T) {
	big := func(n int) []*concordv1.FedRemoteAgent {
		var out []*concordv1.FedRemoteAgent
		for i := range n {
			out = append(out, &concordv1.FedRemoteAgent{Id: fmt.Sprintf("a%04d", i), Description: strings.Repeat("x", 200)})
		}
		return out
	}
	tests := []struct {
		name       string
		upserts    []*concordv1.FedRemoteAgent
		removes    []string
		limit      int
		wantChunks int // 0: more than one
	}{
		{name: "empty", limit: 1 << 10, wantChunks: 1},
		{name: "fits", upserts: big(3), limit: 1 << 10, wantChunks: 1},
		{name: "several", upserts: big(50), removes: []string{"gone1", "gone2"}, limit: 1 << 10},
		{name: "default bound", upserts: big(4000), limit: 256 << 10},
		{name: "one agent over the bound goes alone", upserts: []*concordv1.FedRemoteAgent{{Id: "huge", Description: strings.Repeat("y", 3000)}, {Id: "z"}},
			limit: 1 << 10, wantChunks: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := &concordv1.FedDirectoryApply{PeerSystemId: "dc2", Version: 9, BaseVersion: 4, Upserts: tt.upserts, Removes: tt.removes, Digest: []byte("d")}
			chunks := chunkDirectory(u, tt.limit)
			if tt.wantChunks > 0 && len(chunks) != tt.wantChunks || tt.wantChunks == 0 && len(chunks) < 2 {
				t.Fatalf("%d chunks", len(chunks))
			}
			whole := &concordv1.FedDirectoryApply{}
			for i, c := range chunks {
				if c.GetChunk() != uint32(i) || c.GetMore() != (i < len(chunks)-1) || c.GetVersion() != 9 || c.GetBaseVersion() != 4 ||
					!bytes.Equal(c.GetDigest(), []byte("d")) {
					t.Fatalf("chunk %d header %+v", i, c)
				}
				if n := len(c.GetUpserts()) + len(c.GetRemoves()); proto.Size(c) > tt.limit && n > 1 {
					t.Fatalf("chunk %d: %d bytes over %d with %d items", i, proto.Size(c), tt.limit, n)
				}
				whole.Upserts = append(whole.Upserts, c.GetUpserts()...)
				whole.Removes = append(whole.Removes, c.GetRemoves()...)
			}
			if len(whole.Upserts) != len(tt.upserts) || len(whole.Removes) != len(tt.removes) {
				t.Fatalf("reassembled %d/%d of %d/%d", len(whole.Upserts), len(whole.Removes), len(tt.upserts), len(tt.removes))
			}
			for i := range whole.Upserts {
				if !proto.Equal(whole.Upserts[i], tt.upserts[i]) {
					t.Fatalf("upsert %d changed or out of order", i)
				}
			}
			// Through the state, chunk by chunk: the whole set arrives.
			if len(tt.removes) == 0 {
				s := NewState()
				if err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc2")}); err != nil {
					t.Fatal(err)
				}
				for _, c := range chunks {
					c.Full = true
					if err := apply(t, s, cmdDirPart, &concordv1.FedDirectoryChunk{Update: c}); err != nil {
						t.Fatal(err)
					}
				}
				if got := len(s.Imported("dc2").GetAgents()); got != len(tt.upserts) {
					t.Fatalf("imported %d of %d", got, len(tt.upserts))
				}
			}
		})
	}
}

func TestExportDigest(t *testing.T) {
	a := map[string]*concordv1.FedRemoteAgent{"x": {Id: "x", Role: "r"}, "y": {Id: "y"}}
	b := map[string]*concordv1.FedRemoteAgent{"y": {Id: "y"}, "x": {Id: "x", Role: "r"}}
	c := map[string]*concordv1.FedRemoteAgent{"x": {Id: "x", Role: "s"}, "y": {Id: "y"}}
	d := func(m map[string]*concordv1.FedRemoteAgent) []byte { return exportDigest(m, sortedKeys(m)) }
	if !bytes.Equal(d(a), d(b)) {
		t.Fatal("equal sets, different digests")
	}
	if bytes.Equal(d(a), d(c)) || bytes.Equal(d(a), d(nil)) {
		t.Fatal("different sets, equal digests")
	}
}
