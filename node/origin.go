package node

import (
	"net/http"
	"net/url"
	"strings"
)

// mapOriginCheck returns middleware that refuses (403) a browser's MAP
// connection (WebSocket upgrade or HTTP+SSE request) from an origin that is
// not this node's own host, a member's HTTP address (the console fails over
// to other members' /map) or in Config.AllowedOrigins. Without it any page
// a user opens could drive a node listening on localhost. Requests with no
// Origin header come from non-browser clients and pass.
func (s *Server) mapOriginCheck() func(http.Handler) http.Handler {
	seen := &seenAddrs{addrs: map[string]bool{}}
	allowAll := false
	allowed := make(map[string]bool, len(s.cfg.AllowedOrigins))
	for _, o := range s.cfg.AllowedOrigins {
		if o == "*" {
			allowAll = true
		}
		allowed[strings.ToLower(strings.TrimSuffix(o, "/"))] = true
	}
	ok := func(r *http.Request) bool {
		origin := r.Header.Get("Origin")
		if origin == "" || allowAll || allowed[strings.ToLower(origin)] {
			return true
		}
		u, err := url.Parse(origin)
		if err != nil || u.Host == "" {
			return false
		}
		if strings.EqualFold(u.Host, r.Host) {
			return true
		}
		return seen.isMemberOrigin(s.membership.Members(), origin, r.Host)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !ok(r) {
				s.log.Debug("map connection refused: origin not allowed", "origin", r.Header.Get("Origin"), "peer", r.RemoteAddr)
				http.Error(w, "origin not allowed", http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
