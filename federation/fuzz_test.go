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
