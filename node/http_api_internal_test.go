package node

import (
	"testing"

	"github.com/concordmap/concord/node/membership"
)

// TestSeenAddrs_MemberOrigins checks which origins count as a member's:
// current members, members listed before and gone since, a member bound
// to an unspecified address on the host the request named, and nothing
// that is not a bare http(s) origin.
func TestSeenAddrs_MemberOrigins(t *testing.T) {
	member := func(addr string) membership.Member {
		return membership.Member{NodeMeta: membership.NodeMeta{HTTPAddr: addr}}
	}
	sa := &seenAddrs{addrs: map[string]bool{}}
	// n1 was listed once; later calls list only n2 and n3.
	sa.isMemberOrigin([]membership.Member{member("127.0.0.1:7700")}, "http://x:1", "127.0.0.1:7710")
	now := []membership.Member{member("127.0.0.1:7710"), member("0.0.0.0:7720")}
	for _, tc := range []struct {
		origin, reqHost string
		want            bool
	}{
		{"http://127.0.0.1:7710", "127.0.0.1:7710", true},
		{"https://127.0.0.1:7710", "127.0.0.1:7710", true},
		{"http://127.0.0.1:7700", "127.0.0.1:7710", true}, // remembered after it left the list
		{"http://db.lan:7720", "db.lan:7710", true},       // unspecified bind, the host asked for
		{"http://evil.example:7720", "db.lan:7710", false},
		{"http://127.0.0.1:7799", "127.0.0.1:7710", false},
		{"http://127.0.0.1:7710/ui", "127.0.0.1:7710", false},
		{"ftp://127.0.0.1:7710", "127.0.0.1:7710", false},
		{"null", "127.0.0.1:7710", false},
	} {
		if got := sa.isMemberOrigin(now, tc.origin, tc.reqHost); got != tc.want {
			t.Errorf("isMemberOrigin(%q, host %q) = %v, want %v", tc.origin, tc.reqHost, got, tc.want)
		}
	}
}
