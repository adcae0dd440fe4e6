package membership

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

func validWire() wireMeta {
	return wireMeta{
		nodeID:   "node-1",
		systemID: "dc1",
		meta: NodeMeta{
			HTTPAddr: "10.0.0.1:7700",
			GRPCAddr: "10.0.0.1:7701",
			RaftAddr: "10.0.0.1:7702",
			Version:  "v1.0.0",
			Role:     RoleServer,
		},
		bootstrapExpect: 3,
	}
}

func TestMeta_RoundTrip(t *testing.T) {
	long := strings.Repeat("h", 100) + ".example"
	tests := []struct {
		name string
		edit func(*wireMeta)
	}{
		{"typical", func(*wireMeta) {}},
		{"leaving", func(w *wireMeta) { w.leaving = true }},
		{"bootstrapped", func(w *wireMeta) { w.bootstrapped = true }},
		{"raft voters", func(w *wireMeta) { w.meta.RaftVoters = 5 }},
		{"fsm level", func(w *wireMeta) { w.meta.FSMLevel = 1 }},
		{"ipv6 and names", func(w *wireMeta) {
			w.meta.RaftAddr = "[fd00::1]:7702"
			w.meta.GRPCAddr = "node-1.dc1.internal:7701"
		}},
		{"only raft addr", func(w *wireMeta) {
			w.meta.HTTPAddr, w.meta.GRPCAddr, w.meta.Version = "", "", ""
			w.bootstrapExpect = 0
		}},
		{"long fields", func(w *wireMeta) {
			w.nodeID = strings.Repeat("n", maxIDLen)
			w.systemID = strings.Repeat("s", maxIDLen)
			w.meta.RaftAddr = long + ":1"
			w.meta.Version = strings.Repeat("v", maxVersionLen)
			w.meta.RaftVoters = maxRaftVoters
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := validWire()
			tc.edit(&w)
			b := encodeMeta(w)
			if len(b) > memberlist.MetaMaxSize {
				t.Fatalf("encoded %d bytes, limit %d", len(b), memberlist.MetaMaxSize)
			}
			if b[0] != metaFormatV1 {
				t.Fatalf("version byte %d, want %d", b[0], metaFormatV1)
			}
			got, err := decodeMeta(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if got != w {
				t.Fatalf("round trip: got %+v, want %+v", got, w)
			}
		})
	}
}

// protoMeta encodes a hand-built message behind the version byte, so tests
// can produce meta that encodeMeta itself would never emit.
func protoMeta(t *testing.T, pb *concordv1.GossipMeta) []byte {
	t.Helper()
	b, err := proto.Marshal(pb)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte{metaFormatV1}, b...)
}

func TestMeta_DecodeRejects(t *testing.T) {
	valid := func() *concordv1.GossipMeta {
		return &concordv1.GossipMeta{NodeId: "n1", SystemId: "dc1", RaftAddr: "h:1", Role: concordv1.GossipRole_GOSSIP_ROLE_SERVER}
	}
	with := func(edit func(*concordv1.GossipMeta)) []byte {
		pb := valid()
		edit(pb)
		return protoMeta(t, pb)
	}
	good := encodeMeta(validWire())
	tests := []struct {
		name    string
		in      []byte
		version bool // expect ErrMetaVersion too
	}{
		{"nil", nil, false},
		{"version 0", append([]byte{0}, good[1:]...), true},
		{"version 2", append([]byte{2}, good[1:]...), true},
		{"truncated body", good[:len(good)-3], false},
		{"garbage body", []byte{metaFormatV1, 0xff, 0xff, 0xff, 0xff}, false},
		{"too large", append(bytes.Clone(good), make([]byte, memberlist.MetaMaxSize)...), false},
		{"no role", with(func(p *concordv1.GossipMeta) { p.Role = 0 }), false},
		{"unknown role", with(func(p *concordv1.GossipMeta) { p.Role = 9 }), false},
		{"empty node id", with(func(p *concordv1.GossipMeta) { p.NodeId = "" }), false},
		{"node id with space", with(func(p *concordv1.GossipMeta) { p.NodeId = "a b" }), false},
		{"node id too long", with(func(p *concordv1.GossipMeta) { p.NodeId = strings.Repeat("a", maxIDLen+1) }), false},
		{"empty system id", with(func(p *concordv1.GossipMeta) { p.SystemId = "" }), false},
		{"system id with slash", with(func(p *concordv1.GossipMeta) { p.SystemId = "dc/1" }), false},
		{"no raft addr", with(func(p *concordv1.GossipMeta) { p.RaftAddr = "" }), false},
		{"raft addr without port", with(func(p *concordv1.GossipMeta) { p.RaftAddr = "host" }), false},
		{"raft addr without host", with(func(p *concordv1.GossipMeta) { p.RaftAddr = ":7702" }), false},
		{"grpc port zero", with(func(p *concordv1.GossipMeta) { p.GrpcAddr = "h:0" }), false},
		{"http port too big", with(func(p *concordv1.GossipMeta) { p.HttpAddr = "h:65536" }), false},
		{"version with newline", with(func(p *concordv1.GossipMeta) { p.Version = "v1\n" }), false},
		{"huge bootstrap expect", with(func(p *concordv1.GossipMeta) { p.BootstrapExpect = 1 << 30 }), false},
		{"huge raft voters", with(func(p *concordv1.GossipMeta) { p.RaftVoters = 1 << 20 }), false},
		{"huge fsm level", with(func(p *concordv1.GossipMeta) { p.FsmLevel = 1 << 20 }), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeMeta(tc.in)
			if !errors.Is(err, ErrInvalidMeta) {
				t.Fatalf("decode = %v, want ErrInvalidMeta", err)
			}
			if tc.version != errors.Is(err, ErrMetaVersion) {
				t.Fatalf("decode = %v, ErrMetaVersion expected: %v", err, tc.version)
			}
		})
	}
}

// A newer peer may add protobuf fields; this binary must still accept it.
func TestMeta_DecodeIgnoresUnknownFields(t *testing.T) {
	b := encodeMeta(validWire())
	b = append(b, 0xa0, 0x06, 0x01) // field 100, varint 1
	got, err := decodeMeta(b)
	if err != nil {
		t.Fatalf("decode with an unknown field: %v", err)
	}
	if got != validWire() {
		t.Fatalf("got %+v, want %+v", got, validWire())
	}
}

func FuzzDecodeMeta(f *testing.F) {
	f.Add(encodeMeta(validWire()))
	w := validWire()
	w.leaving = true
	f.Add(encodeMeta(w))
	f.Add([]byte{})
	f.Add([]byte{metaFormatV1})
	f.Add([]byte{2, 0x0a, 0x01, 'x'})
	f.Add([]byte{metaFormatV1, 0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeMeta(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidMeta) {
				t.Fatalf("error %v does not wrap ErrInvalidMeta", err)
			}
			return
		}
		// Whatever decodes must be valid and survive a re-encode.
		if err := got.validate(); err != nil {
			t.Fatalf("decoded meta fails validation: %v", err)
		}
		again, err := decodeMeta(encodeMeta(got))
		if err != nil || again != got {
			t.Fatalf("re-encode round trip: %+v, %v; want %+v", again, err, got)
		}
	})
}
