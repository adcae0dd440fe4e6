package node_test

// Helpers of the adversarial probe suite (probe_*_test.go): a raw
// WebSocket peer that sends exactly the bytes a test gives it, and the
// checks every probe ends with (the node still answers, nothing changed).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
)

// probeTimeout bounds every wait of a probe: a hang shows up as a failure
// within it, never as a stuck test.
const probeTimeout = 5 * time.Second

// startProbeNode starts a TLS dev node with limits small enough that the
// probes reach them quickly (the limits' meaning is unchanged).
func startProbeNode(t *testing.T, tune func(*node.Config)) *node.Server {
	t.Helper()
	cfg := node.DevConfig(t.TempDir())
	secure(&cfg)
	cfg.RPC.MaxFrameBytes = 64 << 10
	cfg.RPC.MaxBatchLen = 16
	cfg.Cluster.HandshakeTimeout = time.Second
	if tune != nil {
		tune(&cfg)
	}
	return startConfig(t, cfg)
}

// rawWS is a WebSocket peer that writes frames verbatim.
//
// The stdio probes reuse it over a stdio bridge: then line and readLine
// replace the socket.
type rawWS struct {
	t        *testing.T
	srv      *node.Server
	conn     *websocket.Conn
	sessions []string // opened by connectAgent

	line     func(string) error     // stdio: write one stdin line
	readLine func() ([]byte, error) // stdio: the next stdout line
	stop     func()                 // stdio: end the bridge
}

func dialProbe(t *testing.T, srv *node.Server) *rawWS {
	t.Helper()
	ws, resp, err := dialProbeErr(srv)
	if err != nil {
		t.Fatalf("dial %s: %v (%v)", srv.MAPURL(), err, resp)
	}
	ws.t, ws.srv = t, srv
	t.Cleanup(ws.closeAndSettle)
	return ws
}

func dialProbeErr(srv *node.Server) (*rawWS, *http.Response, error) {
	d := websocket.Dialer{TLSClientConfig: tlstest.ClientTLS("dev", ""), HandshakeTimeout: probeTimeout}
	c, resp, err := d.Dial(srv.MAPURL(), nil)
	if err != nil {
		return nil, resp, err
	}
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	c.SetReadLimit(-1)
	return &rawWS{conn: c}, resp, nil
}

func (w *rawWS) send(frame string) {
	w.t.Helper()
	if w.line != nil {
		if err := w.line(frame); err != nil {
			w.t.Fatalf("write line: %v", err)
		}
		return
	}
	_ = w.conn.SetWriteDeadline(time.Now().Add(probeTimeout))
	if err := w.conn.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
		w.t.Fatalf("write frame: %v", err)
	}
}

// next reads one frame; it fails the test if none comes within probeTimeout.
func (w *rawWS) next() []byte {
	w.t.Helper()
	if w.readLine != nil {
		b, err := w.readLine()
		if err != nil {
			w.t.Fatalf("read line: %v", err)
		}
		return b
	}
	_ = w.conn.SetReadDeadline(time.Now().Add(probeTimeout))
	_, b, err := w.conn.ReadMessage()
	if err != nil {
		w.t.Fatalf("read frame: %v", err)
	}
	return b
}

// call sends one request with a string id and returns its response,
// skipping notifications and other frames.
func (w *rawWS) call(method string, params any) rpcReply {
	w.t.Helper()
	p, _ := json.Marshal(params)
	id := fmt.Sprintf("c-%d", time.Now().UnixNano())
	w.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":%q,"params":%s}`, id, method, p))
	for {
		var r rpcReply
		b := w.next()
		if json.Unmarshal(b, &r) == nil && string(r.ID) == `"`+id+`"` {
			return r
		}
	}
}

// mustCall is call that fails the test on an error reply.
func (w *rawWS) mustCall(method string, params any) map[string]any {
	w.t.Helper()
	r := w.call(method, params)
	if r.Error != nil {
		w.t.Fatalf("%s: error %s", method, r.raw())
	}
	var out map[string]any
	_ = json.Unmarshal(r.Result, &out)
	return out
}

// connectAgent opens a MAP session as an anonymous agent.
func (w *rawWS) connectAgent() map[string]any {
	w.t.Helper()
	res := w.mustCall("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "name": "prober"})
	if id, ok := res["sessionId"].(string); ok {
		w.sessions = append(w.sessions, id)
	}
	return res
}

// closeAndSettle closes the socket and waits until the node recorded the
// detach of every session it opened, so the next probe's state check does
// not see this one's disconnect land.
func (w *rawWS) closeAndSettle() {
	if w.stop != nil {
		w.stop()
	} else {
		_ = w.conn.Close()
	}
	if w.srv == nil {
		return
	}
	reg := w.srv.Registry()
	waitFor(w.t, func() error {
		for _, id := range w.sessions {
			if s, ok := reg.Session(id); ok && s.Connected {
				return fmt.Errorf("session %s still connected", id)
			}
		}
		return nil
	})
}

// collectUntilSentinel sends a sentinel request after whatever the test
// sent and returns every frame that arrived before the sentinel's reply:
// what the node answered to the probe (nothing, for a notification).
//
// Replies a handler deferred (map/send) may come after the sentinel's, so
// it also waits for at least want frames.
func (w *rawWS) collectUntilSentinel(want int) [][]byte {
	w.t.Helper()
	w.send(`{"jsonrpc":"2.0","id":"sentinel","method":"x-probe/sentinel"}`)
	var got [][]byte
	sentinel := false
	for !sentinel || len(got) < want {
		b := w.next()
		var r rpcReply
		if json.Unmarshal(b, &r) == nil && string(r.ID) == `"sentinel"` {
			if r.Error == nil || r.Error.Code != -32601 {
				w.t.Fatalf("sentinel: want -32601, got %s", b)
			}
			sentinel = true
			continue
		}
		if isEventNotification(b) {
			continue
		}
		got = append(got, b)
	}
	return got
}

// isEventNotification reports frames the node pushes on its own.
func isEventNotification(b []byte) bool {
	var n struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	return json.Unmarshal(b, &n) == nil && n.ID == nil && strings.HasPrefix(n.Method, "map/")
}

// rpcReply is one JSON-RPC response.
type rpcReply struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    *struct {
			Category  string         `json:"category"`
			Retryable *bool          `json:"retryable"`
			Details   map[string]any `json:"details"`
		} `json:"data"`
	} `json:"error"`
}

func (r rpcReply) raw() string { b, _ := json.Marshal(r); return string(b) }

// wantErr is the error a probe must earn: the code, the id echoed (raw
// JSON, "null" when none could be read) and the category (§6).
type wantErr struct {
	code     int
	id       string
	category string
}

// checkError asserts that b is a well-formed JSON-RPC 2.0 error response
// matching want.
func checkError(t *testing.T, b []byte, want wantErr) {
	t.Helper()
	var r rpcReply
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("reply is not a JSON-RPC response: %s", b)
	}
	if r.JSONRPC != "2.0" || r.Error == nil || r.Result != nil {
		t.Fatalf("want an error response, got %s", b)
	}
	if r.Error.Code != want.code {
		t.Fatalf("want code %d, got %s", want.code, b)
	}
	if r.Error.Message == "" {
		t.Fatalf("error without a message: %s", b)
	}
	if want.id != "" && !sameJSON(r.ID, want.id) {
		t.Fatalf("want id %s, got %s", want.id, b)
	}
	if r.Error.Data == nil || r.Error.Data.Category == "" || r.Error.Data.Retryable == nil {
		t.Fatalf("error data lacks category/retryable (§6 policy): %s", b)
	}
	if want.category != "" && r.Error.Data.Category != want.category {
		t.Fatalf("want category %s, got %s", want.category, b)
	}
}

// stateMark is what a rejected probe must leave unchanged: the replicated
// event log's last position and the counts of agents, scopes and sessions.
type stateMark struct {
	last                     uint64
	agents, scopes, sessions int
}

func markState(srv *node.Server) stateMark {
	r := srv.Registry()
	_, last := r.Window()
	return stateMark{last: last, agents: len(r.Agents()), scopes: len(r.Scopes()), sessions: len(r.Sessions())}
}

// checkUnchanged fails when the node's replicated state moved since m.
func checkUnchanged(t *testing.T, srv *node.Server, m stateMark) {
	t.Helper()
	if now := markState(srv); now != m {
		t.Fatalf("a rejected probe changed state: before %+v, after %+v", m, now)
	}
}

// sameJSON reports whether raw and want are the same JSON value (an id may
// come back with its characters escaped).
func sameJSON(raw json.RawMessage, want string) bool {
	var a, b any
	da, db := json.NewDecoder(bytes.NewReader(raw)), json.NewDecoder(strings.NewReader(want))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&a) != nil || db.Decode(&b) != nil {
		return false
	}
	return fmt.Sprint(a) == fmt.Sprint(b)
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
