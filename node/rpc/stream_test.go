package rpc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// stdioPeer is the far side of a ServeStdio connection.
type stdioPeer struct {
	in  *io.PipeWriter // what the server reads
	out *bufio.Reader  // what the server writes
	err chan error     // ServeStdio's return
}

func startStdio(t *testing.T, cfg Config, h Handler) (*Server, *stdioPeer, context.CancelFunc) {
	t.Helper()
	s, err := NewServer(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	p := &stdioPeer{in: inW, out: bufio.NewReader(outR), err: make(chan error, 1)}
	go func() { p.err <- s.ServeStdio(ctx, inR, outW) }()
	t.Cleanup(func() {
		cancel()
		_ = inW.Close()
		_ = outR.Close()
		sctx, c := context.WithTimeout(context.Background(), testTimeout)
		defer c()
		if err := s.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return s, p, cancel
}

func (p *stdioPeer) send(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(p.in, s); err != nil {
		t.Fatal(err)
	}
}

func (p *stdioPeer) line(t *testing.T) string {
	t.Helper()
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := p.out.ReadString('\n')
		ch <- res{s, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("read line: %v", r.err)
		}
		return r.s
	case <-time.After(testTimeout):
		t.Fatal("no line")
		return ""
	}
}

func TestStdio_RequestsNotificationsAndErrors(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxFrameBytes = 4096
	_, p, _ := startStdio(t, cfg, newTestHandler())
	tests := []struct {
		name, in string
		code     int
		id       string
	}{
		{"echo", `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}` + "\n", 0, "1"},
		{"crlf and blank lines", "\n  \r\n" + `{"jsonrpc":"2.0","id":2,"method":"echo"}` + "\r\n", 0, "2"},
		{"notification then request", `{"jsonrpc":"2.0","method":"note"}` + "\n" + `{"jsonrpc":"2.0","id":3,"method":"echo"}` + "\n", 0, "3"},
		{"parse error", "{oops\n", CodeParseError, "null"},
		{"too large keeps going", `{"jsonrpc":"2.0","id":"L","method":"echo","params":{"p":"` + strings.Repeat("z", 10000) + `"}}` + "\n", CodeInvalidRequest, `"L"`},
		{"after too large", `{"jsonrpc":"2.0","id":4,"method":"echo"}` + "\n", 0, "4"},
		{"panic", `{"jsonrpc":"2.0","id":5,"method":"boom"}` + "\n", CodeInternal, "5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.send(t, tt.in)
			line := p.line(t)
			r := decodeResp(t, []byte(line))
			if string(r.ID) != tt.id {
				t.Fatalf("id %s, want %s (line %s)", r.ID, tt.id, line)
			}
			if tt.code == 0 && r.Error != nil || tt.code != 0 && (r.Error == nil || r.Error.Code != tt.code) {
				t.Fatalf("line %s, want code %d", line, tt.code)
			}
		})
	}
}

func TestStdio_NewlinesInsideFramesAreBlanked(t *testing.T) {
	h := newTestHandler()
	_, p, _ := startStdio(t, testConfig(t), h)
	p.send(t, `{"jsonrpc":"2.0","id":1,"method":"echo"}`+"\n")
	p.line(t)
	srv := recvConn(t, h.conns)
	if srv.Transport() != "stdio" {
		t.Fatalf("transport %q", srv.Transport())
	}
	// Pretty-printed raw params (legal JSON whitespace) must not split the line.
	if err := srv.NotifyRaw("map/event", json.RawMessage("{\n  \"a\": 1\n}")); err != nil {
		t.Fatal(err)
	}
	var n struct {
		Params map[string]int `json:"params"`
	}
	if line := p.line(t); json.Unmarshal([]byte(line), &n) != nil || n.Params["a"] != 1 {
		t.Fatalf("line %q", line)
	}
}

func TestStdio_EndsOnEOFAndOnContext(t *testing.T) {
	t.Run("peer EOF", func(t *testing.T) {
		h := newTestHandler()
		_, p, _ := startStdio(t, testConfig(t), h)
		_ = p.in.Close()
		select {
		case err := <-p.err:
			if err != nil {
				t.Fatalf("ServeStdio = %v, want nil", err)
			}
		case <-time.After(testTimeout):
			t.Fatal("ServeStdio did not return on EOF")
		}
		recvConn(t, h.closed)
	})
	t.Run("context cancelled", func(t *testing.T) {
		_, p, cancel := startStdio(t, testConfig(t), newTestHandler())
		cancel()
		// The server closes its writing half: the peer sees EOF.
		if _, err := p.out.ReadString('\n'); !errors.Is(err, io.EOF) {
			t.Fatalf("peer read = %v, want EOF", err)
		}
		select {
		case <-p.err:
		case <-time.After(testTimeout):
			t.Fatal("ServeStdio did not return on cancel")
		}
	})
}

func TestInProcess_CallsBothWaysAndShutdown(t *testing.T) {
	h := newTestHandler()
	s, err := NewServer(testConfig(t), h)
	if err != nil {
		t.Fatal(err)
	}
	clientH := newTestHandler()
	c, err := s.ServeConn(context.Background(), clientH)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, err := c.Call(ctx, "echo", map[string]int{"n": 1})
	if err != nil || string(res) != `{"n":1}` {
		t.Fatalf("call: %s %v", res, err)
	}
	srv := recvConn(t, h.conns)
	if srv.Transport() != "inprocess" || c.Transport() != "inprocess" {
		t.Fatalf("transports %q %q", srv.Transport(), c.Transport())
	}
	if res, err = srv.Call(ctx, "echo", map[string]int{"m": 2}); err != nil || string(res) != `{"m":2}` {
		t.Fatalf("reverse call: %s %v", res, err)
	}
	if err := srv.Notify("hello", nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, testTimeout, func() error {
		if n := clientH.notifications(); len(n) != 1 || n[0] != "hello" {
			return errors.New("notification not delivered")
		}
		return nil
	})
	sctx, cancel := context.WithTimeout(ctx, testTimeout)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(testTimeout):
		t.Fatal("client side not closed by shutdown")
	}
	if _, err := c.Call(ctx, "echo", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after shutdown = %v", err)
	}
}
