package rpc

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/gorilla/websocket"
)

func TestDrain_HintThenReconnectCloseAndNewConnectionsRefused(t *testing.T) {
	h := newTestHandler()
	s, url := startServer(t, testConfig(t), h)
	raw := rawDial(t, url)
	roundTrip(t, raw, `{"jsonrpc":"2.0","id":1,"method":"echo"}`)
	recvConn(t, h.conns)

	hint := map[string]any{"reason": "draining", "nodes": []string{"ws://other/map"}}
	if n := s.Drain("x-test/reconnect", hint, "draining"); n != 1 {
		t.Fatalf("Drain asked %d connections, want 1", n)
	}
	var note struct {
		Method string         `json:"method"`
		Params map[string]any `json:"params"`
	}
	if err := json.Unmarshal(readFrame(t, raw), &note); err != nil {
		t.Fatal(err)
	}
	if note.Method != "x-test/reconnect" || note.Params["reason"] != "draining" {
		t.Fatalf("hint = %+v", note)
	}
	_, _, err := raw.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != CloseReconnect {
		t.Fatalf("after the hint: %v, want close %d", err, CloseReconnect)
	}
	recvConn(t, h.closed)
	if !s.Draining() {
		t.Fatal("Draining() false after Drain")
	}
	_, resp, err := websocket.DefaultDialer.Dial(url, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("dial while draining: err %v, resp %+v; want 503 with Retry-After", err, resp)
	}
	_ = resp.Body.Close()
}
