package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// callResult is what a waiting Call receives.
type callResult struct {
	result json.RawMessage
	err    error
}

var errParamsNotObject = errors.New("rpc: params must be a JSON object")

// Call sends a request to the peer and waits for its response (MAP lets the
// server call into agents). It returns the raw result, an *Error if the peer
// answered with one, ErrClosed if the connection ended first, or ctx.Err().
// When the send queue is full Call waits for room (bounded by ctx).
//
// Do not Call a connection from inside its own Handle with the handler's
// context: its reader is busy and would never read the answer. That case
// returns ErrCallInHandler; use another goroutine.
func (c *Conn) Call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	// The caller waits for the answer anyway: it writes the request itself
	// when no writer is running (putInline), sparing a hand-off.
	p, err := c.start(ctx, method, params, true)
	if err != nil {
		return nil, err
	}
	return p.Wait(ctx)
}

// Pending is a request sent by Start whose response has not been read yet.
// Exactly one goroutine calls Wait, once.
type Pending struct {
	c  *Conn
	id uint64
	ch chan callResult
}

// Start queues a request and returns without waiting for its response, so
// one goroutine can pipeline requests: requests started one after the other
// by one goroutine reach the peer in that order. It waits only for room in
// the send queue (bounded by ctx). The same rules as Call apply; collect
// the response with Pending.Wait.
func (c *Conn) Start(ctx context.Context, method string, params any) (*Pending, error) {
	return c.start(ctx, method, params, false)
}

// start is Start; inline writes the request on the calling goroutine when
// no writer is running (Call), else the writer goroutine sends it, so that
// requests started in a burst leave in one write.
func (c *Conn) start(ctx context.Context, method string, params any, inline bool) (*Pending, error) {
	if owner, _ := ctx.Value(handlerCtxKey{}).(*Conn); owner == c {
		return nil, ErrCallInHandler
	}
	id := c.nextID.Add(1)
	f := getFrame()
	idBuf := appendUintID(make([]byte, 0, 20), id)
	if err := encodeCall(f, idBuf, method, params); err != nil {
		putFrame(f)
		return nil, err
	}
	ch := make(chan callResult, 1)
	c.pmu.Lock()
	if c.ended {
		c.pmu.Unlock()
		putFrame(f)
		return nil, ErrClosed
	}
	if c.pending == nil {
		c.pending = make(map[uint64]chan callResult)
	}
	c.pending[id] = ch
	c.pmu.Unlock()

	put := c.q.put
	if inline {
		put = c.putInline
	}
	if err := put(ctx, f); err != nil {
		putFrame(f)
		c.forget(id)
		return nil, err
	}
	return &Pending{c: c, id: id, ch: ch}, nil
}

// Wait returns the response of a request sent by Start, as Call would: the
// raw result, an *Error, ErrClosed, or ctx.Err() (the response is then
// dropped when it arrives).
func (p *Pending) Wait(ctx context.Context) (json.RawMessage, error) {
	select {
	case r := <-p.ch:
		return r.result, r.err
	case <-ctx.Done():
		p.c.forget(p.id)
		return nil, ctx.Err()
	}
}

func (c *Conn) forget(id uint64) {
	c.pmu.Lock()
	delete(c.pending, id)
	c.pmu.Unlock()
}

// failPending ends every outstanding Call with ErrClosed and refuses new ones.
func (c *Conn) failPending() {
	c.pmu.Lock()
	pending := c.pending
	c.pending, c.ended = nil, true
	c.pmu.Unlock()
	for _, ch := range pending {
		ch <- callResult{err: ErrClosed}
	}
}

// routeResponse hands a response to the Call waiting for it. Responses with
// unknown ids (late after a timeout, or bogus) are dropped.
func (c *Conn) routeResponse(m message) {
	id, ok := parseCallID(m.id)
	if !ok {
		if m.errObj != nil {
			// The peer could not parse something we sent: that is our bug.
			c.logger().Warn("peer reported an error without id", "error", string(truncate(m.errObj, 512)))
		}
		return
	}
	c.pmu.Lock()
	ch := c.pending[id]
	delete(c.pending, id)
	c.pmu.Unlock()
	if ch == nil {
		c.debug("response for unknown call dropped", "call_id", id)
		return
	}
	if m.errObj == nil {
		ch <- callResult{result: m.result}
		return
	}
	var e Error
	if err := json.Unmarshal(m.errObj, &e); err != nil || e.Message == "" && e.Code == 0 {
		ch <- callResult{err: NewError(CodeInternal, "malformed error response").WithDetails(map[string]any{"raw": string(truncate(m.errObj, 512))})}
		return
	}
	ch <- callResult{err: &e}
}

// parseCallID reads back an id we generated (an integer); a peer that
// echoes it as a string is tolerated.
func parseCallID(raw []byte) (uint64, bool) {
	if len(raw) >= 2 && raw[0] == '"' {
		raw = raw[1 : len(raw)-1]
	}
	id, err := strconv.ParseUint(string(raw), 10, 64)
	return id, err == nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// encodeCall builds a request (id != nil) or notification with params of any
// type, encoded straight into the frame.
func encodeCall(f *frame, id []byte, method string, params any) error {
	if raw, ok := params.(json.RawMessage); ok {
		if err := checkRawParams(raw); err != nil {
			return err
		}
		encodeRequest(f, id, method, raw)
		return nil
	}
	encodeRequest(f, id, method, nil)
	if params == nil {
		return nil
	}
	f.b = f.b[:len(f.b)-1] // reopen the object to add params
	f.b = append(f.b, `,"params":`...)
	start := len(f.b)
	var err error
	if f.b, err = appendJSON(f.b, params); err != nil {
		return fmt.Errorf("rpc: encode params: %w", err)
	}
	if f.b[start] != '{' {
		return errParamsNotObject
	}
	f.b = append(f.b, '}')
	return nil
}

// checkRawParams accepts nil/empty or bytes that start a JSON object.
func checkRawParams(raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	if i := skipSpace(raw, 0); i >= len(raw) || raw[i] != '{' {
		return errParamsNotObject
	}
	return nil
}
