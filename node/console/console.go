package console

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// Prefix is the URL path the console is served under.
const Prefix = "/ui/"

// contentSecurityPolicy keeps the page to its own files. connect-src also
// allows other origins because, after a failover, the page talks MAP and
// /v1 to another member of the system (a different origin); the node's
// CORS allowance decides which of those /v1 answers the page may read.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self' ws: wss: http: https:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// Files returns the console's files, rooted at the directory that holds
// index.html.
func Files() fs.FS {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return sub
}

// Handler serves the console's files for requests under Prefix. It is safe
// for concurrent use and holds no state.
func Handler() http.Handler {
	files := http.StripPrefix(Prefix[:len(Prefix)-1], http.FileServerFS(Files()))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		// The embedded files carry no modification time; no-cache makes
		// the browser fetch them again rather than keep an older binary's.
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		files.ServeHTTP(w, r)
	})
}
