package tcpproxy

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// dialTimeout bounds a dial of the target.
const dialTimeout = 5 * time.Second

// Proxy accepts connections on 127.0.0.1 and forwards each to its
// target. Every goroutine it starts ends by Close, which Start registers
// as a test cleanup.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// Start listens on a free loopback port and forwards to target.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("tcpproxy: listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// MAPURL is the ws:// URL of the MAP endpoint behind the proxy.
func (p *Proxy) MAPURL() string { return "ws://" + p.Addr() + "/map" }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		// Bounded: a target that swallows SYNs must not stall the accept
		// loop, nor Close, which waits for it.
		out, err := net.DialTimeout("tcp", p.target, dialTimeout)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
}

// Cut closes every connection forwarded so far; new ones are still
// accepted.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// Close stops accepting, cuts every forwarded connection and waits for
// the proxy's goroutines. It may be called more than once.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
