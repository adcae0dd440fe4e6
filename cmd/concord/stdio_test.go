package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/client/stdio"
	"github.com/concordmap/concord/node/rpc"
)

const stdioTestTimeout = 15 * time.Second

func startDevNode(t *testing.T) *node.Server {
	t.Helper()
	return startDevNodeWith(t, nil)
}

// startDevNodeWith is startDevNode with the dev config adjusted by edit.
func startDevNodeWith(t *testing.T, edit func(*node.Config)) *node.Server {
	t.Helper()
	cfg := node.DevConfig(t.TempDir())
	cfg.Logger = testLogger(t)
	if edit != nil {
		edit(&cfg)
	}
	srv, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), stdioTestTimeout)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		_ = srv.Shutdown(context.Background())
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv
}

// cutProxy forwards TCP to target until cut, which drops every connection
// the way a dead node or network would (no WebSocket close).
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); _, _ = io.Copy(u, c); _ = u.Close() }()
			go func() { defer p.wg.Done(); _, _ = io.Copy(c, u); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() { p.cut(); p.wg.Wait() })
	return p
}

func (p *cutProxy) cut() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// stdioAgent drives `concord stdio` through pipes, as a subprocess would.
type stdioAgent struct {
	t     *testing.T
	in    *io.PipeWriter
	lines chan string // stdout lines; closed when stdout ends
	done  chan error
}

func startStdio(t *testing.T, args ...string) *stdioAgent {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	root := newRootCmd()
	root.SetIn(inR)
	root.SetOut(outW)
	root.SetArgs(append([]string{"stdio"}, args...))
	a := &stdioAgent{t: t, in: inW, lines: make(chan string), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { a.done <- root.ExecuteContext(ctx); _ = outW.Close() }()
	stop := make(chan struct{})
	readerDone := make(chan struct{})
	go func() { // the only stdout reader; ends when stdout closes
		defer close(readerDone)
		defer close(a.lines)
		br := bufio.NewReader(outR)
		for {
			s, err := br.ReadString('\n')
			if err != nil {
				return
			}
			select {
			case a.lines <- s:
			case <-stop:
				_, _ = io.Copy(io.Discard, br)
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = inW.Close()
		close(stop)
		select {
		case <-a.done:
		case <-time.After(stdioTestTimeout):
			t.Error("concord stdio did not stop")
		}
		<-readerDone
	})
	return a
}

func (a *stdioAgent) send(line string) {
	a.t.Helper()
	if _, err := io.WriteString(a.in, line+"\n"); err != nil {
		a.t.Fatal(err)
	}
}

// until returns the first stdout line that satisfies ok (lines before it
// are skipped: events may interleave).
func (a *stdioAgent) until(ok func(map[string]any) bool) map[string]any {
	a.t.Helper()
	timeout := time.After(stdioTestTimeout)
	for {
		select {
		case s, open := <-a.lines:
			if !open {
				a.t.Fatal("stdout ended")
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(s), &m); err != nil {
				a.t.Fatalf("stdout line is not JSON: %q", s)
			}
			if ok(m) {
				return m
			}
		case <-timeout:
			a.t.Fatal("expected line never came")
		}
	}
}

func hasID(id float64) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["id"] == id }
}

// A subprocess agent reaches a real node through `concord stdio`, keeps
// working after the bridge fails over to another URL, and its session with
// its agent is resumed without it re-connecting.
func TestStdio_RelayAndFailover(t *testing.T) {
	srv := startDevNode(t)
	proxy := newCutProxy(t, srv.HTTPAddr())
	a := startStdio(t, "--server", "ws://"+proxy.ln.Addr().String()+"/map,"+srv.MAPURL(), "--max-frame-bytes", "2048")

	a.send(`{"jsonrpc":"2.0","id":1,"method":"map/connect","params":{"protocolVersion":1,"participantType":"agent","name":"sub","disconnectPolicy":{"agentBehavior":"grace-period","gracePeriodMs":60000}}}`)
	res, _ := a.until(hasID(1))["result"].(map[string]any)
	sessionID, _ := res["sessionId"].(string)
	if sessionID == "" {
		t.Fatalf("map/connect result %v", res)
	}
	a.send(`{"jsonrpc":"2.0","id":2,"method":"map/agents/register","params":{"agentId":"sub-1"}}`)
	if m := a.until(hasID(2)); m["error"] != nil {
		t.Fatalf("register: %v", m)
	}
	a.send(`{"jsonrpc":"2.0","id":3,"method":"x","params":{"pad":"` + strings.Repeat("x", 3000) + `"}}`)
	if e, _ := a.until(hasID(3))["error"].(map[string]any); e["code"] != float64(rpc.CodeInvalidRequest) || e["message"] != "Message too large" {
		t.Fatalf("oversized line: %v", e)
	}
	a.send(`not json`)
	if e, _ := a.until(func(m map[string]any) bool { return m["error"] != nil })["error"].(map[string]any); e["code"] != float64(rpc.CodeParseError) {
		t.Fatalf("garbage line: %v", e)
	}

	proxy.cut()
	note := a.until(func(m map[string]any) bool { return m["method"] == stdio.ReconnectedMethod })
	p, _ := note["params"].(map[string]any)
	if p["server"] != srv.MAPURL() || p["reconnected"] != true || p["sessionId"] != sessionID {
		t.Fatalf("reconnect notice %v", p)
	}
	a.send(`{"jsonrpc":"2.0","id":4,"method":"map/agents/get","params":{"agentId":"sub-1"}}`)
	if m := a.until(hasID(4)); m["error"] != nil {
		t.Fatalf("agent after failover: %v", m)
	}

	_ = a.in.Close() // the subprocess exits: the bridge ends cleanly
	select {
	case err := <-a.done:
		a.done <- err
		if err != nil {
			t.Fatalf("concord stdio: %v", err)
		}
	case <-time.After(stdioTestTimeout):
		t.Fatal("concord stdio did not end after stdin closed")
	}
}
