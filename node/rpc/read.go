package rpc

import (
	"errors"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// readLoop reads and serves frames until the transport fails or closes
// (it returns the error). With mayHop, it also returns (nil, true) after
// serving a frame when the transport has no further input buffered and
// released its read buffer, and no input came within Config.ReaderLinger:
// the caller continues the loop on a new goroutine, whose stack starts
// small again (runDetached).
func (c *Conn) readLoop(mayHop bool) (err error, hop bool) {
	idler, _ := c.tr.(idleReleaser)
	for {
		data, err := c.tr.readMessage()
		if err != nil {
			var tl *tooLargeError
			if errors.As(err, &tl) {
				c.rejectTooLarge(tl)
				continue
			}
			return err, false
		}
		if c.closeRequested() { // set by Close, and by beginClose before it closes
			continue // closing: drain until the peer's goodbye or the teardown
		}
		// A hopping reader's first frame (map/connect, usually) is the
		// connection's first output too: its reply is written here
		// rather than by a writer goroutine started for it (replyNow).
		c.handleFrame(data, mayHop && idler != nil && !c.servedOne)
		if mayHop && idler != nil {
			// A connection's first message (map/connect, usually) is
			// often its last for a while: idle sessions hop at once.
			if c.servedOne && c.cfg.ReaderLinger > 0 && !idler.inputBuffered() {
				idler.linger(c.cfg.ReaderLinger)
			}
			c.servedOne = true
			if idler.releaseIfIdle() {
				return nil, true
			}
		}
	}
}

// rejectTooLarge answers an oversized (already discarded) message with
// -32600, echoing its id when the first bytes revealed it.
func (c *Conn) rejectTooLarge(tl *tooLargeError) {
	c.obs.FrameRejected("too_large")
	c.logger().Warn("inbound frame too large", "limit", tl.limit)
	e := NewError(CodeInvalidRequest, "Message too large").WithDetails(map[string]any{"limit": tl.limit})
	c.reply(idFromPrefix(tl.prefix), e)
}

// reply sends one error response outside of a handler.
func (c *Conn) reply(id []byte, e *Error) {
	f := getFrame()
	f.b, _ = appendResponse(f.b, id, nil, e)
	if err := c.q.put(&c.ctx, f); err != nil {
		putFrame(f)
	}
}

// handleFrame decodes one frame and serves its message(s) in order. The
// replies of a batch go out as one array frame; a frame that needs no reply
// (notifications, responses) sends nothing. With writeNow the reply is
// written before handleFrame returns when no writer is running (replyNow).
func (c *Conn) handleFrame(data []byte, writeNow bool) {
	df := decodeFrame(data, c.cfg.MaxBatchLen)
	if df.fatal != nil {
		c.obs.FrameRejected(rejectReason(df.fatal.code))
		c.reply(nil, df.fatal.rpcError())
		return
	}
	c.setHandling(true)
	c.curInBatch = df.batch
	f := getFrame()
	if !df.batch {
		if !c.serveMessage(f, df.one, df.oneE) {
			putFrame(f)
			f = nil
		}
	} else {
		f.b = append(f.b, '[')
		for k := range df.msgs {
			mark := len(f.b)
			if mark > 1 {
				f.b = append(f.b, ',')
			}
			if !c.serveMessage(f, df.msgs[k], df.errs[k]) {
				f.b = f.b[:mark]
			}
		}
		if len(f.b) == 1 {
			putFrame(f)
			f = nil
		} else {
			f.b = append(f.b, ']')
		}
	}
	// Replies wait for room: a peer that does not read its answers stops
	// being served (backpressure) instead of growing the queue.
	if f != nil {
		var err error
		if writeNow {
			err = c.replyNow(f)
		} else {
			err = c.q.put(&c.ctx, f)
		}
		if err != nil {
			putFrame(f)
		}
	}
	c.runAfterReply()
	if c.setHandling(false) {
		code, reason := c.closeState()
		c.beginClose(code, reason)
	}
}

// serveMessage handles one decoded object and appends its reply to f.
// It reports whether a reply was appended.
func (c *Conn) serveMessage(f *frame, m message, derr *decodeError) bool {
	if derr != nil {
		c.obs.FrameRejected(rejectReason(derr.code))
		f.b, _ = appendResponse(f.b, derr.id, nil, derr.rpcError())
		return true
	}
	if m.kind == kindResponse {
		c.routeResponse(m)
		return false
	}
	req := Request{ID: m.id, Method: c.methodName(m), Params: m.params}
	c.cur = &req
	result, rerr, panicked := c.invoke(&req)
	d := c.curDeferred
	c.cur, c.curDeferred = nil, nil
	if d != nil { // the handler answers later (Defer)
		if panicked {
			d.Reply(nil, rerr)
		}
		return false
	}
	if req.ID == nil {
		return false
	}
	var encErr error
	f.b, encErr = appendResponse(f.b, req.ID, result, rerr)
	if encErr != nil {
		c.logger().Error("encode result", "method", req.Method, "err", encErr)
	}
	return true
}

// invoke runs the handler, turning panics and foreign errors into -32603.
// A request whose handler deferred its reply is observed when it replies.
func (c *Conn) invoke(req *Request) (result any, rerr *Error, panicked bool) {
	var start time.Time
	if c.obsOn {
		start = time.Now()
		c.curStart = start // Defer measures from here too
	}
	defer func() {
		if p := recover(); p != nil {
			c.logger().Error("handler panic", "method", req.Method, "panic", p, "stack", string(debug.Stack()))
			result, rerr, panicked = nil, internalError(), true
		}
		if c.obsOn && req.ID != nil && c.curDeferred == nil {
			code := 0
			if rerr != nil {
				code = rerr.Code
			}
			c.obs.RPCDone(req.Method, code, time.Since(start))
		}
	}()
	res, err := c.h.Handle(&c.ctx, c, req)
	if rerr = c.toRPCError(req.Method, req.ID, err); rerr != nil {
		return nil, rerr, false
	}
	return res, nil, false
}

// toRPCError maps a handler's error to what the peer is sent: nil for
// success (a typed nil *Error included), an *Error as is, anything else a
// generic -32603 with the real error logged.
func (c *Conn) toRPCError(method string, id []byte, err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		if e == nil { // a typed nil *Error: the handler meant "no error"
			return nil
		}
		if id == nil {
			c.debug("notification handler failed", "method", method, "err", err)
		}
		return e
	}
	c.logger().Error("handler failed", "method", method, "err", err)
	return internalError()
}

// methodName returns the request's method as a string, interning the names
// a connection uses so the steady state does not allocate.
func (c *Conn) methodName(m message) string {
	if m.methodEscaped {
		return string(unescapeString(m.method))
	}
	if s, ok := methodNames.Load(string(m.method)); ok {
		return s.(string)
	}
	s := string(m.method)
	if methodNamesLen.Load() < maxMethodNames {
		if _, loaded := methodNames.LoadOrStore(s, s); !loaded {
			methodNamesLen.Add(1)
		}
	}
	return s
}

// methodNames interns method names for every connection (a MAP node
// serves a few dozen), so a handled request does not allocate its method
// string and an idle session holds no table of its own. Bounded: names
// past maxMethodNames (junk from a misbehaving peer) are allocated per
// request instead.
var (
	methodNames    sync.Map // string -> string
	methodNamesLen atomic.Int64
)

const maxMethodNames = 1024

func rejectReason(code int) string {
	switch code {
	case CodeParseError:
		return "parse"
	case CodeInvalidParams:
		return "invalid_params"
	default:
		return "invalid_request"
	}
}
