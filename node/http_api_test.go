package node_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestHTTP_ConsoleReadAPI checks the /v1 reads the web console uses
// (members, raft peers, placement, federation links, run files), the console's own files,
// and the CORS allowance: only a member's origin may read /v1 cross-origin.
func TestHTTP_ConsoleReadAPI(t *testing.T) {
	srv := startNode(t, t.TempDir())
	c := dial(t, srv)
	c.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent"})
	c.call("map/agents/register", map[string]any{"agentId": "alice"})
	self := srv.HTTPURL()         // https: the test node runs TLS
	web := httpsClient("dev", "") // the console reads anonymously

	for _, tc := range []struct {
		name, method, path, origin string
		wantStatus                 int
		wantBody, wantType         string
		wantCORS                   string // Access-Control-Allow-Origin, "" = absent
	}{
		{name: "members", path: "/v1/members", wantStatus: 200,
			wantBody: `"id":"dev-1","systemId":"dev","status":"alive","role":"server"`},
		{name: "members lists the http address", path: "/v1/members", wantStatus: 200, wantBody: `"httpAddr":"` + srv.HTTPAddr() + `"`},
		{name: "raft peers", path: "/v1/raft/peers", wantStatus: 200,
			wantBody: `"leaderId":"dev-1","nodeId":"dev-1","peers":[{"id":"dev-1","address":`},
		{name: "raft peer is the leader voter", path: "/v1/raft/peers", wantStatus: 200, wantBody: `"suffrage":"voter","leader":true}`},
		{name: "placement", path: "/v1/placement", wantStatus: 200, wantBody: `"agents":[{"id":"alice","homeNode":"dev-1"}]`},
		{name: "no federation links", path: "/v1/federation/links", wantStatus: 200,
			wantBody: `{"gateways":[],"links":[],"nodeId":"dev-1","systemId":"dev"}`},
		{name: "federation links are a member read", path: "/v1/federation/links", origin: self, wantStatus: 200, wantCORS: self},
		{name: "unknown run", path: "/v1/runs/01NOPE/result.json", wantStatus: 404, wantBody: `"error":"run not found"`},
		{name: "member origin may read", path: "/v1/status", origin: self, wantStatus: 200, wantCORS: self},
		{name: "other origin may not", path: "/v1/status", origin: "http://evil.example:80", wantStatus: 200},
		{name: "origin with a path is not an origin", path: "/v1/status", origin: self + "/x", wantStatus: 200},
		{name: "no CORS outside /v1", path: "/metrics", origin: self, wantStatus: 200},
		{name: "console index", path: "/ui/", wantStatus: 200, wantType: "text/html", wantBody: `<script type="module" src="js/main.js">`},
		{name: "console module", path: "/ui/js/main.js", wantStatus: 200, wantType: "text/javascript"},
		{name: "console is read-only", method: http.MethodPost, path: "/ui/", wantStatus: 405},
		{name: "console missing file", path: "/ui/nope.js", wantStatus: 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodGet
			}
			req, _ := http.NewRequest(method, self+tc.path, nil)
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			resp, err := web.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method, tc.path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus || !strings.Contains(string(body), tc.wantBody) {
				t.Fatalf("%s %s: status %d, want %d and body containing %q, got:\n%.1000s", method, tc.path, resp.StatusCode, tc.wantStatus, tc.wantBody, body)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, tc.wantType) {
				t.Errorf("Content-Type = %q, want %q", ct, tc.wantType)
			}
			if got := resp.Header.Get("Access-Control-Allow-Origin"); got != tc.wantCORS {
				t.Errorf("Access-Control-Allow-Origin = %q, want %q", got, tc.wantCORS)
			}
		})
	}
}
