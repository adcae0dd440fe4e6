package authz

import (
	"errors"
	"net/http"
	"strings"

	"github.com/concordmap/concord/node/pki"
)

// HTTP wraps next: each request is authorized by classify (its path and
// method decide its class). No credential answers 401 with a Bearer
// challenge; an insufficient one 403. A client certificate counts when the
// TLS handshake verified it (tlsconf with client auth request/require).
func (a *Authorizer) HTTP(classify func(*http.Request) Class, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := Caller{}
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			if id, err := pki.IdentityOf(r.TLS.PeerCertificates[0]); err == nil {
				c.ID, c.HasID = id, true
			}
		}
		if v := r.Header.Get("Authorization"); v != "" && !isMAPPath(r.URL.Path) {
			c.Token, c.HasTok = bearer(v)
		}
		err := a.Check(classify(r), c)
		if err == nil {
			next.ServeHTTP(w, r)
			return
		}
		a.log.Warn("http request refused", "path", r.URL.Path, "method", r.Method, "caller", describe(c), "remote", r.RemoteAddr, "err", err)
		code := http.StatusForbidden
		if errors.Is(err, errUnauthenticated) {
			code = http.StatusUnauthorized
			w.Header().Set("WWW-Authenticate", `Bearer realm="concord"`)
		}
		http.Error(w, err.Error(), code)
	})
}

// isMAPPath: MAP clients' Authorization headers belong to MAP, not to the
// operator token.
func isMAPPath(p string) bool { return p == "/map" || strings.HasPrefix(p, "/map/") }
