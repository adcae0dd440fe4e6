package authz_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/concordmap/concord/node/authz"
	"github.com/concordmap/concord/node/pki"
)

func TestAuthorizer_Check(t *testing.T) {
	member := func(id string) bool { return id == "n1" }
	tlsA, err := authz.New(authz.Config{TLS: true, IsMember: member, Token: []byte("tok"), MetricsToken: []byte("scrape")})
	if err != nil {
		t.Fatal(err)
	}
	plainA, err := authz.New(authz.Config{Token: []byte("tok")})
	if err != nil {
		t.Fatal(err)
	}
	open, err := authz.New(authz.Config{})
	if err != nil {
		t.Fatal(err)
	}
	server := func(n string) authz.Caller {
		return authz.Caller{ID: pki.Identity{SystemID: "s", Role: pki.RoleServer, Name: n}, HasID: true}
	}
	operator := authz.Caller{ID: pki.Identity{SystemID: "s", Role: pki.RoleOperator, Name: "alice"}, HasID: true}
	token := func(s string) authz.Caller { return authz.Caller{Token: s, HasTok: true} }
	anon := authz.Caller{}
	tests := []struct {
		name string
		a    *authz.Authorizer
		cl   authz.Class
		c    authz.Caller
		ok   bool
	}{
		{"peer: member", tlsA, authz.Peer, server("n1"), true},
		{"peer: non-member server", tlsA, authz.Peer, server("n2"), false},
		{"peer: operator", tlsA, authz.Peer, operator, false},
		{"peer: token", tlsA, authz.Peer, token("tok"), false},
		{"peer: anonymous", tlsA, authz.Peer, anon, false},
		{"read: member", tlsA, authz.Read, server("n1"), true},
		{"read: operator", tlsA, authz.Read, operator, true},
		{"read: anonymous", tlsA, authz.Read, anon, false},
		{"admin: operator", tlsA, authz.Admin, operator, true},
		{"admin: token", tlsA, authz.Admin, token("tok"), true},
		{"admin: wrong token", tlsA, authz.Admin, token("nope"), false},
		{"admin: member passing a request on", tlsA, authz.Admin, server("n1"), true},
		{"admin: non-member", tlsA, authz.Admin, server("n2"), false},
		{"operator: member server", tlsA, authz.Operator, server("n1"), false},
		{"operator: token", tlsA, authz.Operator, token("tok"), true},
		{"open: anonymous", tlsA, authz.Open, anon, true},
		{"metrics: metrics token", tlsA, authz.Metrics, token("scrape"), true},
		{"metrics: operator token", tlsA, authz.Metrics, token("tok"), true},
		{"metrics: member", tlsA, authz.Metrics, server("n1"), true},
		{"metrics: operator", tlsA, authz.Metrics, operator, true},
		{"metrics: anonymous", tlsA, authz.Metrics, anon, false},
		{"metrics: wrong token", tlsA, authz.Metrics, token("nope"), false},
		{"metrics token for a read", tlsA, authz.Read, token("scrape"), false},
		{"metrics token for admin", tlsA, authz.Admin, token("scrape"), false},
		{"metrics token for an operator endpoint", tlsA, authz.Operator, token("scrape"), false},
		{"metrics token for a peer method", tlsA, authz.Peer, token("scrape"), false},
		{"insecure metrics: anonymous", open, authz.Metrics, anon, true},
		{"deny: operator", tlsA, authz.Deny, operator, false},
		{"insecure peer: anonymous", plainA, authz.Peer, anon, true},
		{"insecure admin: anonymous with a token set", plainA, authz.Admin, anon, false},
		{"insecure admin: token", plainA, authz.Admin, token("tok"), true},
		{"insecure admin: no token set", open, authz.Admin, anon, true},
		{"insecure deny", open, authz.Deny, anon, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.a.Check(tc.cl, tc.c); (err == nil) != tc.ok {
				t.Fatalf("Check = %v, want ok=%v", err, tc.ok)
			}
		})
	}
	if _, err := authz.New(authz.Config{TLS: true}); err == nil {
		t.Error("TLS without IsMember accepted")
	}
}

func TestAuthorizer_HTTP(t *testing.T) {
	a, err := authz.New(authz.Config{Token: []byte("tok")})
	if err != nil {
		t.Fatal(err)
	}
	h := a.HTTP(func(r *http.Request) authz.Class {
		if strings.HasPrefix(r.URL.Path, "/map") {
			return authz.Open
		}
		return authz.Admin
	}, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	for _, tc := range []struct {
		path, auth string
		want       int
	}{
		{"/admin", "", http.StatusUnauthorized},
		{"/admin", "Bearer nope", http.StatusForbidden},
		{"/admin", "Basic dG9r", http.StatusForbidden},
		{"/admin", "Bearer tok", http.StatusNoContent},
		{"/map", "Bearer some-map-credential", http.StatusNoContent}, // MAP's own header, not the token
	} {
		req := httptest.NewRequest(http.MethodGet, tc.path, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%s %q: %d, want %d", tc.path, tc.auth, rec.Code, tc.want)
		}
	}
}
