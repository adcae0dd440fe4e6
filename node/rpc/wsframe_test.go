package rpc

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

// TestWS_DirectFramesAtLengthBoundaries checks the server's own framing
// (wsframe.go) at the payload lengths where the header form changes
// (7-bit, 16-bit, 64-bit lengths) and past the gather buffer, by reading
// the replies with the WebSocket library as a client.
func TestWS_DirectFramesAtLengthBoundaries(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxFrameBytes = 1 << 20
	_, url := startServer(t, cfg, newTestHandler())
	ws := rawDial(t, url)
	ws.SetReadLimit(2 << 20)
	// The reply to echo of {"p":"<pad>"} is this overhead plus len(pad).
	overhead := len(roundTrip(t, ws, `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"p":""}}`))
	for _, size := range []int{125, 126, 127, 0xffff, 0x10000, 0x10001, corkLimit - maxWSHeaderSz, corkLimit, corkLimit + 1} {
		pad := strings.Repeat("x", size-overhead)
		req := `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"p":"` + pad + `"}}`
		// Two requests in one burst: a big frame must not disturb its neighbour.
		for range 2 {
			if err := ws.WriteMessage(websocket.TextMessage, []byte(req)); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			got := readFrame(t, ws)
			if len(got) != size || !bytes.Contains(got, []byte(pad)) {
				t.Fatalf("size %d: got a %d-byte frame", size, len(got))
			}
		}
	}
}

func TestAppendWSHeader(t *testing.T) {
	tests := []struct {
		n    int
		want []byte
	}{
		{0, []byte{0x81, 0}},
		{125, []byte{0x81, 125}},
		{126, []byte{0x81, 126, 0, 126}},
		{0xffff, []byte{0x81, 126, 0xff, 0xff}},
		{0x10000, []byte{0x81, 127, 0, 0, 0, 0, 0, 1, 0, 0}},
	}
	for _, tt := range tests {
		if got := appendWSHeader(nil, tt.n); !bytes.Equal(got, tt.want) {
			t.Errorf("appendWSHeader(%d) = %x, want %x", tt.n, got, tt.want)
		}
	}
}
