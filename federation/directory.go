package federation

import (
	"crypto/sha256"
	"encoding/binary"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// exportDigest is a digest of an export set (agents by id, keys sorted):
// equal sets give equal digests on every node of the exporting system.
func exportDigest(agents map[string]*concordv1.FedRemoteAgent, keys []string) []byte {
	h := sha256.New()
	opts := proto.MarshalOptions{Deterministic: true}
	var n [8]byte
	for _, k := range keys {
		b, err := opts.Marshal(agents[k])
		if err != nil {
			continue // a FedRemoteAgent always marshals
		}
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	return h.Sum(nil)
}

// chunkDirectory splits u into updates whose encoded size stays within
// limit (one agent or id always goes, alone if need be), numbered 0, 1,
// ... with more set on all but the last. Each is one Raft entry on the
// importing side.
func chunkDirectory(u *concordv1.FedDirectoryApply, limit int) []*concordv1.FedDirectoryApply {
	head := proto.CloneOf(u)
	head.Upserts, head.Removes = nil, nil
	base := proto.Size(head) + 16 // chunk number and more
	var out []*concordv1.FedDirectoryApply
	cur, size := proto.CloneOf(head), base
	add := func(n int) {
		if size+n > limit && len(cur.GetUpserts())+len(cur.GetRemoves()) > 0 {
			out = append(out, cur)
			cur, size = proto.CloneOf(head), base
		}
		size += n
	}
	for _, a := range u.GetUpserts() {
		add(proto.Size(a) + 4)
		cur.Upserts = append(cur.Upserts, a)
	}
	for _, id := range u.GetRemoves() {
		add(len(id) + 4)
		cur.Removes = append(cur.Removes, id)
	}
	out = append(out, cur)
	for i, c := range out {
		c.Chunk, c.More = uint32(i), i < len(out)-1
	}
	return out
}
