package stalltest

import (
	"crypto/tls"
	"encoding/binary"
	"net"
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
			if len(greeting) > 0 {
				_, _ = w.Write(greeting)
			}
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
