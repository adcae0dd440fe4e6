package rpc

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// maskedFrame builds a client frame (FIN set, masked with a fixed key).
func maskedFrame(op byte, payload string) []byte {
	key := []byte{1, 2, 3, 4}
	b := []byte{0x80 | op, 0x80 | byte(len(payload))}
	b = append(b, key...)
	for i := range len(payload) {
		b = append(b, payload[i]^key[i%4])
	}
	return b
}

func TestControlFrameLen(t *testing.T) {
	pong, ping := maskedFrame(websocket.PongMessage, ""), maskedFrame(websocket.PingMessage, "hello")
	text := maskedFrame(websocket.TextMessage, "{}")
	unmasked := []byte{0x80 | websocket.PongMessage, 0}
	fragmented := append([]byte{websocket.PingMessage}, pong[1:]...)
	reserved := append([]byte{0x80 | 0x40 | websocket.PingMessage}, pong[1:]...)
	tests := []struct {
		name string
		b    []byte
		want int
	}{
		{"empty pong", pong, 6},
		{"ping with payload", ping, 11},
		{"pong followed by more", append(append([]byte{}, pong...), text...), 6},
		{"partial ping", ping[:8], 0},
		{"text frame", text, 0},
		{"close frame", maskedFrame(websocket.CloseMessage, ""), 0},
		{"unmasked", unmasked, 0},
		{"not final", fragmented, 0},
		{"reserved bit", reserved, 0},
		{"too short", pong[:3], 0},
	}
	for _, tt := range tests {
		if got := controlFrameLen(tt.b); got != tt.want {
			t.Errorf("%s: controlFrameLen = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestIdleConn_KeepalivesAndBurstsAfterIdle: a server connection that went
// idle (its read buffer released, its reader on a fresh goroutine) answers
// pings while idle, then serves a request larger than its wake read and a
// burst of pipelined requests written at once.
func TestIdleConn_KeepalivesAndBurstsAfterIdle(t *testing.T) {
	_, url := startServer(t, testConfig(t), newTestHandler())
	ws := rawDial(t, url)
	if r := decodeResp(t, roundTrip(t, ws, `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}`)); string(r.Result) != `{"a":1}` {
		t.Fatalf("first echo: %+v", r)
	}
	pongs := make(chan string, 4)
	ws.SetPongHandler(func(p string) error { pongs <- p; return nil })
	for i := range 3 {
		if err := ws.WriteControl(websocket.PingMessage, []byte(fmt.Sprint("p", i)), time.Now().Add(testTimeout)); err != nil {
			t.Fatal(err)
		}
	}
	big := strings.Repeat("x", 100<<10)
	frame := `{"jsonrpc":"2.0","id":2,"method":"echo","params":{"big":"` + big + `"}}`
	if err := ws.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
		t.Fatal(err)
	}
	// Reading the reply also runs the pong handler for the pongs before it.
	if r := decodeResp(t, readFrame(t, ws)); !strings.Contains(string(r.Result), big) {
		t.Fatalf("big echo: %d bytes of result", len(r.Result))
	}
	for i := range 3 {
		select {
		case p := <-pongs:
			if p != fmt.Sprint("p", i) {
				t.Fatalf("pong %d = %q", i, p)
			}
		case <-time.After(testTimeout):
			t.Fatalf("pong %d missing", i)
		}
	}
	// A burst: many requests in one write reach the server together.
	var burst []byte
	for i := range 200 {
		burst = append(burst, maskedFrame(websocket.TextMessage, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"echo","params":{"i":%d}}`, 100+i, i))...)
	}
	if _, err := ws.UnderlyingConn().Write(burst); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		r := decodeResp(t, readFrame(t, ws))
		if want := fmt.Sprintf(`{"i":%d}`, i); string(r.Result) != want {
			t.Fatalf("burst reply %d = %s, want %s", i, r.Result, want)
		}
	}
}

// FuzzControlFrameLen: whatever an idle connection reads, the check never
// reads past the input and only accepts whole masked ping/pong frames.
func FuzzControlFrameLen(f *testing.F) {
	f.Add(maskedFrame(websocket.PongMessage, ""))
	f.Add(maskedFrame(websocket.PingMessage, strings.Repeat("p", 125)))
	f.Add(maskedFrame(websocket.TextMessage, "{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n := controlFrameLen(b)
		if n == 0 {
			return
		}
		if n > len(b) || n != 6+int(b[1]&0x7f) {
			t.Fatalf("len %d for %d bytes", n, len(b))
		}
		if op := b[0] & 0x0f; op != websocket.PingMessage && op != websocket.PongMessage {
			t.Fatalf("accepted opcode %d", op)
		}
	})
}
