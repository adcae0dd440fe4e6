package node

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHTTP_MAPRefusedUntilCaughtUp checks that a node which has not yet
// caught up with the log (here: never started, so it knows no leader)
// refuses MAP connections with 503 + Retry-After before any upgrade, and
// reports why on /v1/ready, while /v1/health still answers.
func TestHTTP_MAPRefusedUntilCaughtUp(t *testing.T) {
	srv, err := New(DevConfig(t.TempDir()))
	if err != nil {
		t.Fatalf("new node: %v", err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	web := httptest.NewServer(srv.httpHandler())
	t.Cleanup(web.Close)

	for _, tc := range []struct {
		path       string
		wantStatus int
		wantBody   string
	}{
		{"/map", http.StatusServiceUnavailable, `"reason":"catching up: no raft leader"`},
		{"/v1/ready", http.StatusServiceUnavailable, `"reason":"catching up: no raft leader"`},
		{"/v1/health", http.StatusOK, `"status":"ok"`},
	} {
		req, _ := http.NewRequest(http.MethodGet, web.URL+tc.path, nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		resp, err := web.Client().Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.wantStatus || !strings.Contains(string(body), tc.wantBody) {
			t.Errorf("GET %s: %d %s, want %d containing %s", tc.path, resp.StatusCode, body, tc.wantStatus, tc.wantBody)
		}
		if tc.path == "/map" && resp.Header.Get("Retry-After") == "" {
			t.Errorf("GET /map while catching up: no Retry-After header")
		}
	}
}
