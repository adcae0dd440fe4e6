package rpctest

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/concordmap/concord/node/rpc"
)

// AttachMethod is the request a client sends, with params {"session": id},
// to attach its connection to a session in a Sessions table.
const AttachMethod = "attach"

// Sessions is a session table over real in-process rpc connections. It
// satisfies the LocalSessions interfaces of router and fanout, and, as the
// rpc server's handler, attaches the calling connection to a session on
// AttachMethod (any other request fails with method-not-found). Safe for
// concurrent use.
type Sessions struct {
	mu sync.Mutex
	m  map[string]*rpc.Conn
}

// NewSessions returns an empty table.
func NewSessions() *Sessions { return &Sessions{m: map[string]*rpc.Conn{}} }

// Conn returns the connection attached to session id.
func (s *Sessions) Conn(id string) (*rpc.Conn, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[id]
	return c, ok
}

// Handle implements rpc.Handler.
func (s *Sessions) Handle(_ context.Context, c *rpc.Conn, req *rpc.Request) (any, error) {
	var p struct{ Session string }
	if req.Method != AttachMethod || json.Unmarshal(req.Params, &p) != nil {
		return nil, rpc.NewError(rpc.CodeMethodNotFound, "")
	}
	s.mu.Lock()
	s.m[p.Session] = c
	s.mu.Unlock()
	return map[string]bool{"ok": true}, nil
}

// Closed implements rpc.Handler. A closed connection stays in the table on
// purpose: tests check how senders fail on a connection that is gone.
func (s *Sessions) Closed(*rpc.Conn) {}

// Inbox is a client-side rpc.Handler that copies the params of every
// Method notification into C and ignores everything else. Handle blocks
// while C is full, so size C for what a test expects to receive.
type Inbox struct {
	Method string
	C      chan json.RawMessage
}

// NewInbox returns an Inbox for method with a buffer of size.
func NewInbox(method string, size int) *Inbox {
	return &Inbox{Method: method, C: make(chan json.RawMessage, size)}
}

// Handle implements rpc.Handler.
func (b *Inbox) Handle(_ context.Context, _ *rpc.Conn, req *rpc.Request) (any, error) {
	if req.Method == b.Method {
		b.C <- append(json.RawMessage(nil), req.Params...)
	}
	return nil, nil
}

// Closed implements rpc.Handler.
func (b *Inbox) Closed(*rpc.Conn) {}

var (
	_ rpc.Handler = (*Sessions)(nil)
	_ rpc.Handler = (*Inbox)(nil)
)
