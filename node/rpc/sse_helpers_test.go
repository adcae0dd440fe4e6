package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// sseEnv is a Server serving WebSocket at /map and HTTP+SSE under /map/ on
// an httptest server bound to 127.0.0.1:0.
type sseEnv struct {
	srv  *Server
	h    *testHandler
	sse  *sseHandler
	base string
}

func startSSE(t *testing.T, cfg Config, scfg SSEConfig, h *testHandler) *sseEnv {
	t.Helper()
	srv, err := NewServer(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	sh, err := srv.HTTPSSEHandler(scfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/map", srv)
	mux.Handle("/map/", sh)
	hs := httptest.NewServer(mux)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		hs.CloseClientConnections()
		hs.Close()
	})
	return &sseEnv{srv: srv, h: h, sse: sh.(*sseHandler), base: hs.URL}
}

func testSSEConfig() SSEConfig {
	c := DefaultSSEConfig()
	c.RequestTimeout = testTimeout
	return c
}

// postResult is one POST's answer.
type postResult struct {
	status  int
	session string
	body    []byte
}

func (e *sseEnv) post(t *testing.T, path, session, body string) postResult {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if session != "" {
		req.Header.Set(SessionHeader, session)
	}
	resp, err := (&http.Client{Timeout: testTimeout}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: read: %v", path, err)
	}
	return postResult{status: resp.StatusCode, session: resp.Header.Get(SessionHeader), body: b}
}

// connect creates a session with one echo call and returns its id.
func (e *sseEnv) connect(t *testing.T) string {
	t.Helper()
	r := e.post(t, "/map/rpc", "", `{"jsonrpc":"2.0","id":"hello","method":"echo","params":{}}`)
	if r.status != http.StatusOK || r.session == "" {
		t.Fatalf("session create: %d %q session %q", r.status, r.body, r.session)
	}
	return r.session
}

// sseEvt is one parsed SSE event.
type sseEvt struct{ id, name, data string }

// sseConn reads one GET /map/events stream on its own goroutine.
type sseConn struct {
	status  int
	session string
	events  chan sseEvt // closed when the stream ends
	cancel  context.CancelFunc
}

func (e *sseEnv) stream(t *testing.T, session string, header map[string]string) *sseConn {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"/map/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	if session != "" {
		req.Header.Set(SessionHeader, session)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET /map/events: %v", err)
	}
	sc := &sseConn{status: resp.StatusCode, session: resp.Header.Get(SessionHeader), events: make(chan sseEvt, 256), cancel: cancel}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(sc.events)
		defer resp.Body.Close()
		readSSE(resp.Body, sc.events)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return sc
}

// readSSE parses events until the body ends. Comment-only blocks are
// skipped; a non-event body (an error answer) becomes one event named
// "body".
func readSSE(r io.Reader, out chan<- sseEvt) {
	br := bufio.NewReader(r)
	var ev sseEvt
	has := false
	for {
		line, err := br.ReadString('\n')
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && err == nil:
			if has {
				out <- ev
			}
			ev, has = sseEvt{}, false
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			ev.id, has = line[4:], true
		case strings.HasPrefix(line, "event: "):
			ev.name, has = line[7:], true
		case strings.HasPrefix(line, "data: "):
			ev.data, has = line[6:], true
		case line != "":
			out <- sseEvt{name: "body", data: line}
		}
		if err != nil {
			return
		}
	}
}

func (sc *sseConn) next(t *testing.T) sseEvt {
	t.Helper()
	select {
	case ev, ok := <-sc.events:
		if !ok {
			t.Fatal("event stream ended")
		}
		return ev
	case <-time.After(testTimeout):
		t.Fatal("no event")
	}
	return sseEvt{}
}

// expectEnd waits for the stream to end, returning the events before it.
func (sc *sseConn) expectEnd(t *testing.T) []sseEvt {
	t.Helper()
	var got []sseEvt
	timeout := time.After(testTimeout)
	for {
		select {
		case ev, ok := <-sc.events:
			if !ok {
				return got
			}
			got = append(got, ev)
		case <-timeout:
			t.Fatalf("stream did not end; got %v", got)
		}
	}
}

// compactJSON strips insignificant whitespace, for comparing bodies.
func compactJSON(t *testing.T, b []byte) string {
	t.Helper()
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatalf("invalid JSON %q: %v", b, err)
	}
	return out.String()
}
