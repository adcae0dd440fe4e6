package console

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"strings"
	"testing"
)

// TestFiles_ReferencesResolve checks that every file index.html and the
// modules reference is embedded, and that nothing is loaded from another
// origin (no CDN: the console works offline and under its CSP).
func TestFiles_ReferencesResolve(t *testing.T) {
	files := Files()
	ref := regexp.MustCompile(`(?:src|href)="([^"#]+)"|from '(\./[^']+)'|import '(\./[^']+)'`)
	external := regexp.MustCompile(`(?:src|href)="(?:https?:)?//|from '(?:https?:)?//|@import`)
	seen := 0
	err := fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(files, name)
		if err != nil {
			return err
		}
		if m := external.Find(b); m != nil {
			t.Errorf("%s loads from another origin: %s", name, m)
		}
		for _, m := range ref.FindAllStringSubmatch(string(b), -1) {
			target := m[1] + m[2] + m[3]
			if strings.HasPrefix(target, "data:") {
				continue // inline, nothing to fetch
			}
			p := path.Clean(path.Join(path.Dir(name), target))
			if _, err := fs.Stat(files, p); err != nil {
				t.Errorf("%s references %s, which is not embedded", name, target)
			}
			seen++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 10 {
		t.Fatalf("found only %d references; the pattern no longer matches the sources", seen)
	}
}

// TestHandler serves files with their types and security headers, and
// nothing but GET and HEAD.
func TestHandler(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		status       int
		ctype        string
	}{
		{http.MethodGet, "/ui/", 200, "text/html"},
		{http.MethodHead, "/ui/", 200, "text/html"},
		{http.MethodGet, "/ui/app.css", 200, "text/css"},
		{http.MethodGet, "/ui/js/map.js", 200, "text/javascript"},
		{http.MethodGet, "/ui/missing.js", 404, ""},
		{http.MethodPost, "/ui/", 405, ""},
		{http.MethodDelete, "/ui/app.css", 405, ""},
	} {
		rec := httptest.NewRecorder()
		Handler().ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.status {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.path, rec.Code, tc.status)
			continue
		}
		if !strings.HasPrefix(rec.Header().Get("Content-Type"), tc.ctype) {
			t.Errorf("%s %s: Content-Type %q, want %q", tc.method, tc.path, rec.Header().Get("Content-Type"), tc.ctype)
		}
		if tc.status == 200 && !strings.Contains(rec.Header().Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("%s %s: no content security policy", tc.method, tc.path)
		}
	}
}
