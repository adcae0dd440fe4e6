package pki_test

import (
	"net/url"
	"testing"

	"github.com/concordmap/concord/node/pki"
)

// FuzzParseIdentity: identity URIs come from peers' certificates. Parsing
// never panics, and an accepted identity round-trips through URI.
func FuzzParseIdentity(f *testing.F) {
	for _, s := range []string{"concord://sys/server/n1", "concord://sys/operator/alice", "concord://a/b/c/d", "concord://%zz/server/x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		id, err := pki.ParseIdentity(u)
		if err != nil {
			return
		}
		back, err := pki.ParseIdentity(id.URI())
		if err != nil || back != id {
			t.Fatalf("%q: %+v does not round-trip: %+v %v", s, id, back, err)
		}
	})
}
