package stalltest

import (
	"bufio"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// H2Settings is what a stalled HTTP/2 server writes after the preface:
// SETTINGS with INITIAL_WINDOW_SIZE 2^31-1, then a WINDOW_UPDATE of the
// connection by as much, so flow control never stops the client and only
// the sockets fill.
func H2Settings() []byte {
	const window = 1<<31 - 1
	frames := []byte{0, 0, 6, 0x4, 0, 0, 0, 0, 0, 0, 0x4}
	frames = binary.BigEndian.AppendUint32(frames, window)
	frames = append(frames, 0, 0, 4, 0x8, 0, 0, 0, 0, 0)
	return binary.BigEndian.AppendUint32(frames, window-65535)
}

// Peer listens on 127.0.0.1 and returns its address. Each accepted
// connection gets a 4 KiB receive buffer; with cfg set it completes the
// TLS handshake (within 10 s); then greeting, if any, is written once and
// nothing is ever read. Its listener and connections close when the test
// ends.
func Peer(t testing.TB, cfg *tls.Config, greeting []byte) string {
	t.Helper()
	return serve(t, cfg, func(c net.Conn) {
		if len(greeting) > 0 {
			_, _ = c.Write(greeting)
		}
	})
}

// WebSocket is Peer for a WebSocket server: it reads the client's
// opening handshake, accepts the upgrade (whatever the path), and then
// never reads again. Its address is host:port; dial ws://addr/... (wss
// with cfg).
func WebSocket(t testing.TB, cfg *tls.Config) string {
	t.Helper()
	return serve(t, cfg, func(c net.Conn) {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		_ = req.Body.Close()
		sum := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + wsKeyGUID))
		_, _ = fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
			base64.StdEncoding.EncodeToString(sum[:]))
	})
}

// wsKeyGUID is RFC 6455's constant for the Sec-WebSocket-Accept answer.
const wsKeyGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// serve accepts connections as Peer says and runs greet on each (after
// the TLS handshake, with cfg); then nothing more is read.
func serve(t testing.TB, cfg *tls.Config, greet func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
			conns <- c
			var w net.Conn = c
			if cfg != nil {
				tc := tls.Server(c, cfg)
				_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
				if tc.Handshake() != nil {
					continue
				}
				w = tc
			}
			greet(w)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		close(conns)
		for c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}
