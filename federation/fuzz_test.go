package federation

import (
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// FuzzDecodeToken: any text an operator pastes is refused or accepted
// without a panic, and an accepted token is well formed.
func FuzzDecodeToken(f *testing.F) {
	good, _ := EncodeToken(&concordv1.FedToken{SystemId: "dc2", PeerSystemId: "dc1", Addrs: []string{"a:1"}, Secret: make([]byte, secretLen), ExpiresAtMs: 1})
	for _, s := range []string{good, "", tokenPrefix, tokenPrefix + "AAAA", "concordfed2.x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := DecodeToken(s)
		if err != nil {
			return
		}
		if !validSystemID(tok.GetSystemId()) || len(tok.GetSecret()) != secretLen || len(tok.GetAddrs()) == 0 {
			t.Fatalf("accepted a malformed token: %v", tok)
		}
	})
}

// FuzzEnvelope: any bytes a peer sends as an envelope decode or fail, and
// CheckInbound never panics; what it accepts has a sane path and hops.
func FuzzEnvelope(f *testing.F) {
	b, _ := proto.Marshal(validEnv())
	f.Add(b)
	f.Add([]byte{0x0a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		var env concordv1.FedEnvelope
		if proto.Unmarshal(b, &env) != nil {
			return
		}
		if CheckInbound(&env, "dc2", "dc1", 1<<16) == nil {
			if env.GetHopCount() > env.GetMaxHops() || len(env.GetPath()) == 0 || env.GetPath()[len(env.GetPath())-1] != "dc1" {
				t.Fatalf("accepted %v", &env)
			}
			_ = BuildMessage(&env)
			if env.GetToAgent() != "" && !json.Valid(BuildServiceParams(&env)) {
				t.Fatalf("service params of %v are not JSON", &env)
			}
		}
	})
}

// FuzzDirectoryChunks: any sequence of directory updates a peer sends
// (decoded from arbitrary bytes, proposed as chunks) is applied or
// refused without a panic, keeps the staged update bounded, and leaves a
// state that survives a snapshot round trip.
func FuzzDirectoryChunks(f *testing.F) {
	seed := func(us ...*concordv1.FedDirectoryApply) []byte {
		var out []byte
		for _, u := range us {
			b, _ := proto.Marshal(u)
			out = append(out, byte(len(b)))
			out = append(out, b...)
		}
		return out
	}
	a := &concordv1.FedRemoteAgent{Id: "a"}
	f.Add(seed(&concordv1.FedDirectoryApply{Version: 3, Full: true, More: true, Upserts: []*concordv1.FedRemoteAgent{a}},
		&concordv1.FedDirectoryApply{Version: 3, Full: true, Chunk: 1, Removes: []string{"b"}}))
	f.Add(seed(&concordv1.FedDirectoryApply{Version: 2, BaseVersion: 1, Chunk: 4}))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := NewState()
		if err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc2")}); err != nil {
			t.Fatal(err)
		}
		for len(b) > 0 {
			n := int(b[0])
			b = b[1:]
			if n > len(b) {
				n = len(b)
			}
			var u concordv1.FedDirectoryApply
			if proto.Unmarshal(b[:n], &u) == nil {
				u.PeerSystemId = "dc2"
				_ = apply(t, s, cmdDirPart, &concordv1.FedDirectoryChunk{Update: &u})
			}
			b = b[n:]
		}
		if s.stagedBytes["dc2"] > maxStagedBytes {
			t.Fatalf("staged %d bytes", s.stagedBytes["dc2"])
		}
		roundTrip(t, s)
	})
}
