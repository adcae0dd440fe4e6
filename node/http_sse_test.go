package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/rpc"
)

// httpClient is a MAP client over the node's HTTP+SSE transport.
type httpClient struct {
	t       *testing.T
	base    string
	web     *http.Client // trusts the test CA
	session string
	nextID  atomic.Int64
	events  chan sseEvent // from GET /map/events; closed when it ends
}

type sseEvent struct{ id, name, data string }

func newHTTPClient(t *testing.T, srv *node.Server) *httpClient {
	return &httpClient{t: t, base: srv.HTTPURL(), web: httpsClient("dev", "")}
}

// post sends body to path and returns the status and body.
func (c *httpClient) post(path, body string) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.session != "" {
		req.Header.Set(rpc.SessionHeader, c.session)
	}
	resp, err := c.web.Do(req)
	if err != nil {
		c.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	if s := resp.Header.Get(rpc.SessionHeader); s != "" {
		c.session = s
	}
	return resp.StatusCode, b
}

// call makes one request on POST /map/rpc and returns its result.
func (c *httpClient) call(method string, params any) map[string]any {
	c.t.Helper()
	p, _ := json.Marshal(params)
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, c.nextID.Add(1), method, p)
	status, b := c.post("/map/rpc", body)
	var resp struct {
		Result map[string]any
		Error  *rpc.Error
	}
	if err := json.Unmarshal(b, &resp); err != nil || status != http.StatusOK || resp.Error != nil {
		c.t.Fatalf("%s: status %d body %s", method, status, b)
	}
	return resp.Result
}

// openStream attaches the session's event stream.
func (c *httpClient) openStream() {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/map/events", nil)
	req.Header.Set(rpc.SessionHeader, c.session)
	resp, err := (&http.Client{Transport: c.web.Transport}).Do(req) // no timeout: a stream
	if err != nil || resp.StatusCode != http.StatusOK {
		cancel()
		c.t.Fatalf("GET /map/events: %v %v", err, resp)
	}
	c.events = make(chan sseEvent, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(c.events)
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		var ev sseEvent
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "" && ev.name != "":
				c.events <- ev
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.name = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[6:]
			}
		}
	}()
	c.t.Cleanup(func() { cancel(); <-done })
}

// next returns the next event whose JSON-RPC method is method.
func (c *httpClient) next(method string) json.RawMessage {
	c.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				c.t.Fatalf("stream ended waiting for %s", method)
			}
			var m struct {
				Method string
				Params json.RawMessage
			}
			if ev.name == "map.event" && json.Unmarshal([]byte(ev.data), &m) == nil && m.Method == method {
				return m.Params
			}
		case <-timeout:
			c.t.Fatalf("no %s on the stream", method)
		}
	}
}

// An agent on HTTP+SSE and one on WebSocket talk to each other through a
// real node; the HTTP one also gets subscription events on its stream.
func TestHTTPSSE_AgentsAcrossTransports(t *testing.T) {
	srv := startNode(t, t.TempDir())
	inbox := make(chan json.RawMessage, 4)
	bob := dialWith(t, srv, notifyFunc(func(method string, params json.RawMessage) {
		if method == "map/message" {
			inbox <- params
		}
	}))
	bob.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent"})
	bob.call("map/agents/register", map[string]any{"agentId": "bob"})

	alice := newHTTPClient(t, srv)
	res := alice.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "name": "alice"})
	if res["sessionId"] == "" || alice.session == "" {
		t.Fatalf("connect: %v (http session %q)", res, alice.session)
	}
	alice.openStream()
	alice.call("map/agents/register", map[string]any{"agentId": "alice"})
	alice.call("map/subscribe", map[string]any{"filter": map[string]any{"eventTypes": []string{"agent_registered"}}})

	// alice -> bob over the node; bob answers; the answer reaches alice's stream.
	sent := alice.call("map/send", map[string]any{"to": map[string]any{"agent": "bob"}, "payload": map[string]any{"q": "ping"}})
	if d, _ := sent["delivered"].([]any); len(d) != 1 || d[0] != "bob" {
		t.Fatalf("send: %v", sent)
	}
	select {
	case m := <-inbox:
		if !strings.Contains(string(m), `"from":"alice"`) {
			t.Fatalf("bob got %s", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("bob never received alice's message")
	}
	bob.call("map/send", map[string]any{"to": map[string]any{"agent": "alice"}, "payload": map[string]any{"a": "pong"}})
	if msg := alice.next("map/message"); !strings.Contains(string(msg), `"from":"bob"`) || !strings.Contains(string(msg), `"pong"`) {
		t.Fatalf("alice got %s", msg)
	}

	// A registration by someone else is an event on alice's subscription.
	bob.call("map/agents/register", map[string]any{"agentId": "carol"})
	if ev := alice.next("map/event"); !strings.Contains(string(ev), "carol") {
		t.Fatalf("event %s", ev)
	}

	// A batch through the node; then map/disconnect and DELETE end the sessions.
	status, b := alice.post("/map/batch", `[{"jsonrpc":"2.0","id":"g","method":"map/agents/get","params":{"agentId":"bob"}},{"jsonrpc":"2.0","id":"x","method":"no/such"}]`)
	if status != http.StatusOK || !strings.Contains(string(b), `"id":"g","result"`) || !strings.Contains(string(b), `"code":-32601`) {
		t.Fatalf("batch: %d %s", status, b)
	}
	alice.call("map/disconnect", map[string]any{})
	req, _ := http.NewRequest(http.MethodDelete, alice.base+"/map/session", nil)
	req.Header.Set(rpc.SessionHeader, alice.session)
	resp, err := alice.web.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE /map/session: %v %v", err, resp)
	}
	_ = resp.Body.Close()
	if status, _ := alice.post("/map/rpc", `{"jsonrpc":"2.0","id":1,"method":"map/agents/list"}`); status != http.StatusNotFound {
		t.Fatalf("after disconnect: status %d", status)
	}
}

// The node's shutdown ends open event streams instead of waiting for them
// (http.Server.Shutdown waits for active requests).
func TestHTTPSSE_NodeShutdownWithOpenStream(t *testing.T) {
	srv := startNode(t, t.TempDir())
	c := newHTTPClient(t, srv)
	c.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "client"})
	c.openStream()
	start := time.Now()
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("shutdown took %v with a stream open", d)
	}
	for range c.events { // the stream ends
	}
}
