package tcpproxy

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo serves a line echo on loopback until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string) error {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return err
	}
	got, err := r.ReadString('\n')
	if err == nil && got != msg+"\n" {
		t.Fatalf("echo %q, want %q", got, msg)
	}
	return err
}

// TestProxy_ForwardsCutsAndAcceptsAgain: bytes pass both ways, Cut breaks
// the connections made so far, and a new connection works after it.
func TestProxy_ForwardsCutsAndAcceptsAgain(t *testing.T) {
	p := Start(t, echo(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if err := roundTrip(t, c, r, "hello"); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	p.Cut()
	if err := roundTrip(t, c, r, "after cut"); err == nil {
		t.Fatal("a cut connection still carried bytes")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := roundTrip(t, c2, bufio.NewReader(c2), "again"); err != nil {
		t.Fatalf("a new connection after Cut: %v", err)
	}
	p.Close()
	p.Close() // twice is fine
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("a closed proxy still accepts")
	}
}
