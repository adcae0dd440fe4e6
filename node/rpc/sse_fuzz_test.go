package rpc

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// FuzzSSEPost feeds arbitrary bodies to POST /map/rpc and /map/batch of
// one session and checks the answer's shape: a known status, a JSON body
// (object or array of JSON-RPC responses) when there is one, never a panic
// or a hang, and the session keeps working.
func FuzzSSEPost(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}`,
		`{"jsonrpc":"2.0","method":"note"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"echo"},{"jsonrpc":"2.0","id":"x","method":"fail"},7]`,
		`[{"jsonrpc":"2.0","id":1,"method":"echo"},{"jsonrpc":"2.0","id":1,"method":"echo"}]`,
		`{"jsonrpc":"2.0","id":3,"result":{}}`,
		`[]`, `{`, "\xff", `{"jsonrpc":"1.0","id":2}`, `[{"jsonrpc":"2.0","method":"note"}]`,
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	cfg := DefaultConfig()
	cfg.MaxFrameBytes = 4096
	cfg.MaxBatchLen = 16
	// The one session serves the whole run: the test handler never
	// authenticates it, and the pre-auth timer would close it after 10 s
	// of fuzzing ("session broken").
	cfg.PreAuthTimeout = time.Hour
	srv, err := NewServer(cfg, newTestHandler())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	hh, err := srv.HTTPSSEHandler(testSSEConfig())
	if err != nil {
		f.Fatal(err)
	}
	do := func(path, session, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		if session != "" {
			req.Header.Set(SessionHeader, session)
		}
		rec := httptest.NewRecorder()
		hh.ServeHTTP(rec, req)
		return rec
	}
	open := do("/map/rpc", "", `{"jsonrpc":"2.0","id":0,"method":"echo"}`)
	sid := open.Header().Get(SessionHeader)
	if open.Code != http.StatusOK || sid == "" {
		f.Fatalf("open session: %d %s", open.Code, open.Body)
	}
	f.Fuzz(func(t *testing.T, body string, batch bool) {
		path := "/map/rpc"
		if batch {
			path = "/map/batch"
		}
		rec := do(path, sid, body)
		switch rec.Code {
		case http.StatusAccepted:
			if rec.Body.Len() != 0 {
				t.Fatalf("202 with body %q", rec.Body)
			}
		case http.StatusOK, http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge:
			checkResponses(t, rec.Body.Bytes(), rec.Code == http.StatusOK && batch)
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
		if r := do("/map/rpc", sid, `{"jsonrpc":"2.0","id":"alive","method":"echo","params":{}}`); r.Code != http.StatusOK {
			t.Fatalf("session broken after %q: %d %s", body, r.Code, r.Body)
		}
	})
}

// checkResponses asserts b is one JSON-RPC response, or an array of them
// when array is set.
func checkResponses(t *testing.T, b []byte, array bool) {
	t.Helper()
	var resps []wireResp
	if array {
		if err := json.Unmarshal(b, &resps); err != nil || len(resps) == 0 {
			t.Fatalf("want a non-empty array of responses, got %q (%v)", b, err)
		}
	} else {
		var r wireResp
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("want one response, got %q (%v)", b, err)
		}
		resps = append(resps, r)
	}
	for _, r := range resps {
		if r.JSONRPC != "2.0" || (r.Error == nil) == (r.Result == nil) {
			t.Fatalf("malformed response in %q", b)
		}
	}
}
