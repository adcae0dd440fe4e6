package node_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/concordmap/concord/node/rpc"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
)

// httpProbe is one request to the HTTP+SSE transport (map-protocol.md
// §2.2) and the status and error it must earn.
type httpProbe struct {
	name, method, path string
	session            string // MAP-Session header; "" sends none
	body               string
	status             int
	want               *wantErr // nil: no JSON-RPC error body expected
}

func httpProbes() []httpProbe {
	e := func(code int, id string) *wantErr { return &wantErr{code: code, id: id, category: "protocol"} }
	bogus := "AAAAAAAAAAAAAAAAAAAAAA"
	return []httpProbe{
		{name: "invalid JSON", method: "POST", path: "/map/rpc", body: `{"jsonrpc":`, status: 400, want: e(-32700, "null")},
		{name: "not an object", method: "POST", path: "/map/rpc", body: `42`, status: 400, want: e(-32600, "null")},
		{name: "empty body", method: "POST", path: "/map/rpc", body: ``, status: 400, want: e(-32700, "null")},
		{name: "invalid UTF-8", method: "POST", path: "/map/rpc", body: "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}", status: 400, want: e(-32700, "null")},
		{name: "empty batch", method: "POST", path: "/map/batch", body: `[]`, status: 400, want: e(-32600, "null")},
		{name: "batch over MaxBatchLen", method: "POST", path: "/map/batch", body: "[" + strings.TrimSuffix(strings.Repeat(`{"jsonrpc":"2.0","id":1,"method":"x-n"},`, 17), ",") + "]", status: 400, want: e(-32600, "null")},
		{name: "object on the batch path", method: "POST", path: "/map/batch", body: `{"jsonrpc":"2.0","id":1,"method":"map/agents/list"}`, status: 400, want: e(-32600, "null")},
		{name: "oversized", method: "POST", path: "/map/rpc", body: paddedRequest("big", 64<<10+1), status: 413, want: e(-32600, `"big"`)},
		{name: "bogus session on POST", method: "POST", path: "/map/rpc", session: bogus, body: `{"jsonrpc":"2.0","id":1,"method":"map/agents/list"}`, status: 404, want: e(-32600, "null")},
		{name: "huge bogus session on POST", method: "POST", path: "/map/rpc", session: strings.Repeat("s", 8000), body: `{"jsonrpc":"2.0","id":1,"method":"map/agents/list"}`, status: 404, want: e(-32600, "null")},
		{name: "bogus session on GET events", method: "GET", path: "/map/events", session: bogus, status: 404, want: e(-32600, "null")},
		{name: "bogus session in the query", method: "GET", path: "/map/events?session=" + bogus, status: 404, want: e(-32600, "null")},
		{name: "bogus session on DELETE", method: "DELETE", path: "/map/session", session: bogus, status: 404, want: e(-32600, "null")},
		{name: "DELETE without a session", method: "DELETE", path: "/map/session", status: 400, want: e(-32600, "null")},
		{name: "wrong HTTP method", method: "PUT", path: "/map/rpc", body: `{}`, status: 405},
		{name: "query before connect", method: "POST", path: "/map/rpc", body: `{"jsonrpc":"2.0","id":7,"method":"map/agents/list"}`, status: 200, want: &wantErr{code: 1000, id: "7", category: "auth"}},
		{name: "unknown method", method: "POST", path: "/map/rpc", body: `{"jsonrpc":"2.0","id":7,"method":"map/nope"}`, status: 200, want: e(-32601, "7")},
		{name: "connect as a notification", method: "POST", path: "/map/rpc", body: `{"jsonrpc":"2.0","method":"map/connect","params":{"protocolVersion":1,"participantType":"agent"}}`, status: 202},
	}
}

// TestProbe_HTTPSSE sends every HTTP probe and checks status, error body
// and that nothing was written; then a normal session still works.
func TestProbe_HTTPSSE(t *testing.T) {
	srv := startProbeNode(t, nil)
	web := httpsClient("dev", "")
	for _, p := range httpProbes() {
		t.Run(p.name, func(t *testing.T) {
			before := markState(srv)
			req, err := http.NewRequestWithContext(context.Background(), p.method, srv.HTTPURL()+p.path, strings.NewReader(p.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if p.session != "" {
				req.Header.Set(rpc.SessionHeader, p.session)
			}
			resp, err := web.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", p.method, p.path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != p.status {
				t.Fatalf("want status %d, got %d: %s", p.status, resp.StatusCode, body)
			}
			if p.want != nil {
				checkError(t, body, *p.want)
			}
			if sid := resp.Header.Get(rpc.SessionHeader); sid != "" {
				closeHTTPSession(t, web, srv.HTTPURL(), sid)
			}
			checkUnchanged(t, srv, before)
		})
	}
	c := newHTTPClient(t, srv)
	c.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent"})
	c.call("map/agents/list", map[string]any{})
	closeHTTPSession(t, web, srv.HTTPURL(), c.session)
}

// closeHTTPSession deletes an HTTP session a probe opened.
func closeHTTPSession(t *testing.T, web *http.Client, base, id string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, base+"/map/session", nil)
	req.Header.Set(rpc.SessionHeader, id)
	resp, err := web.Do(req)
	if err != nil {
		t.Fatalf("DELETE session: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotFound {
		t.Fatalf("DELETE session: status %d", resp.StatusCode)
	}
}

// TestProbe_ForeignOrigin: a web page of another origin cannot drive the
// node through a visitor's browser: WebSocket upgrade and HTTP+SSE POST
// with a foreign Origin are refused (403) and open no session.
func TestProbe_ForeignOrigin(t *testing.T) {
	srv := startProbeNode(t, nil)
	before := markState(srv)
	d := websocket.Dialer{TLSClientConfig: tlstest.ClientTLS("dev", ""), HandshakeTimeout: probeTimeout}
	c, resp, err := d.Dial(srv.MAPURL(), http.Header{"Origin": {"https://evil.example"}})
	if err == nil {
		_ = c.Close()
		t.Fatal("WebSocket upgrade from a foreign origin accepted")
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("WebSocket upgrade from a foreign origin: want 403, got %v %v", resp, err)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.HTTPURL()+"/map/rpc", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"map/connect","params":{"protocolVersion":1,"participantType":"agent"}}`))
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Content-Type", "application/json")
	r, err := httpsClient("dev", "").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Body.Close()
	if r.StatusCode != http.StatusForbidden || r.Header.Get(rpc.SessionHeader) != "" {
		t.Fatalf("POST from a foreign origin: want 403 and no session, got %d %q", r.StatusCode, r.Header.Get(rpc.SessionHeader))
	}
	checkUnchanged(t, srv, before)
}
