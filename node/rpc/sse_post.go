package rpc

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"time"
)

// postSlot is one message of a POST body, in body order.
type postSlot struct {
	elem  []byte // the message as sent
	id    string // raw JSON id of a request awaiting its response ("" otherwise)
	local []byte // an answer made here (invalid element); not fed to the Conn
}

// postPlan is a validated POST body.
type postPlan struct {
	batch bool
	slots []postSlot
}

// servePost handles POST /map/rpc (batch false) and POST /map/batch.
func (h *sseHandler) servePost(w http.ResponseWriter, r *http.Request, batch bool) {
	deadline := time.Now().Add(h.cfg.RequestTimeout)
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(deadline) // a slow body cannot hold us past it
	body, tl, err := readBody(r.Body, h.srv.cfg.MaxFrameBytes)
	if tl != nil {
		h.rejected("too_large")
		e := NewError(CodeInvalidRequest, "Message too large").WithDetails(map[string]any{"limit": tl.limit})
		writeRPC(w, http.StatusRequestEntityTooLarge, nil, idFromPrefix(tl.prefix), e)
		return
	}
	if err != nil {
		h.log.Debug("read POST body", "peer", r.RemoteAddr, "err", err)
		return // the client is gone or too slow; nobody reads an answer
	}
	// A named session must exist whatever the body; a new one is created
	// only for a body worth serving.
	named := r.Header.Get(SessionHeader) != ""
	var sess *httpSession
	if named {
		var status int
		var serr *Error
		if sess, status, serr = h.sessionFor(r, false); serr != nil {
			writeRPC(w, status, nil, nil, serr)
			return
		}
		defer sess.end()
	}
	plan, id, perr := h.plan(body, batch)
	if perr != nil {
		writeRPC(w, http.StatusBadRequest, nil, id, perr)
		return
	}
	if !named {
		s, status, serr := h.create(r)
		if serr != nil {
			writeRPC(w, status, nil, nil, serr)
			return
		}
		sess = s
		defer sess.end()
	}
	w.Header().Set(SessionHeader, sess.id)
	_ = rc.SetWriteDeadline(deadline.Add(h.srv.cfg.WriteTimeout))
	h.exchange(w, r, sess, plan, deadline)
}

// sessionFor returns the request's session, creating one when the request
// names none and create is set. The session is marked active (call end).
func (h *sseHandler) sessionFor(r *http.Request, create bool) (*httpSession, int, *Error) {
	id := r.Header.Get(SessionHeader)
	if id == "" && r.Method == http.MethodGet {
		id = r.URL.Query().Get("session") // EventSource cannot set headers
	}
	if id == "" {
		if !create {
			return nil, http.StatusBadRequest, NewError(CodeInvalidRequest, "Missing "+SessionHeader+" header")
		}
		return h.create(r)
	}
	sess := h.lookup(id)
	if sess == nil {
		return nil, http.StatusNotFound, sessionNotFound()
	}
	sess.begin()
	if sess.isClosed() {
		sess.end()
		return nil, http.StatusNotFound, sessionNotFound()
	}
	return sess, 0, nil
}

// readBody reads at most limit bytes. A longer body is reported as a
// *tooLargeError holding its first bytes (to echo the id); the rest is left
// unread, so net/http closes the connection after answering.
func readBody(body io.Reader, limit int64) ([]byte, *tooLargeError, error) {
	b, err := io.ReadAll(io.LimitReader(body, limit+1))
	if int64(len(b)) > limit {
		return nil, &tooLargeError{limit: limit, prefix: bytes.Clone(b[:min(len(b), idPrefixBytes)])}, nil
	}
	return b, nil, err
}

// plan validates a body with the WebSocket path's decoder. A body that
// cannot be served at all gets the same error the WebSocket path would
// send (returned with the id to echo); invalid elements of a batch are
// answered in place, like the WebSocket path does.
func (h *sseHandler) plan(body []byte, batch bool) (*postPlan, []byte, *Error) {
	df := decodeFrame(body, h.srv.cfg.MaxBatchLen)
	switch {
	case df.fatal != nil:
		h.rejected(rejectReason(df.fatal.code))
		return nil, nil, df.fatal.rpcError()
	case batch && !df.batch:
		h.rejected("invalid_request")
		return nil, nil, NewError(CodeInvalidRequest, "").WithDetails(map[string]any{"reason": "POST /map/batch takes a JSON array"})
	case !batch && df.batch:
		h.rejected("invalid_request")
		return nil, nil, NewError(CodeInvalidRequest, "").WithDetails(map[string]any{"reason": "a JSON array must be POSTed to /map/batch"})
	case !batch && df.oneE != nil:
		h.rejected(rejectReason(df.oneE.code))
		return nil, df.oneE.id, df.oneE.rpcError()
	}
	p := &postPlan{batch: batch}
	elems := [][]byte{body}
	if batch {
		elems = splitMessages(body)
	}
	seen := make(map[string]bool)
	for k, elem := range elems {
		m, derr := df.at(k)
		slot := postSlot{elem: elem}
		switch {
		case derr != nil:
			h.rejected(rejectReason(derr.code))
			slot.local, _ = appendResponse(nil, derr.id, nil, derr.rpcError())
		case m.kind == kindRequest && m.id != nil && seen[string(m.id)]:
			h.rejected("invalid_request")
			e := NewError(CodeInvalidRequest, "").WithDetails(map[string]any{"reason": "duplicate request id in batch"})
			slot.local, _ = appendResponse(nil, m.id, nil, e)
		case m.kind == kindRequest && m.id != nil:
			seen[string(m.id)] = true
			slot.id = string(m.id)
		}
		p.slots = append(p.slots, slot)
	}
	return p, nil, nil
}

// exchange registers the plan's requests, hands the frame to the session's
// reader and answers with the responses, all before deadline.
func (h *sseHandler) exchange(w http.ResponseWriter, r *http.Request, sess *httpSession, p *postPlan, deadline time.Time) {
	wt := &postWaiter{resp: make(map[string][]byte), done: make(chan struct{})}
	var ids []string
	for _, sl := range p.slots {
		if sl.id != "" {
			ids = append(ids, sl.id)
		}
	}
	taken := sess.register(wt, ids)
	if len(taken) > 0 && !p.batch {
		writeRPC(w, http.StatusConflict, nil, []byte(p.slots[0].id),
			NewError(CodeInvalidRequest, "Request id already in flight in this HTTP session"))
		return
	}
	p.markTaken(taken)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	if feed := p.feed(); feed != nil {
		select {
		case sess.inbound <- feed:
		case <-sess.readEOF:
			h.fail(w, sess, wt, p, http.StatusNotFound, sessionNotFound())
			return
		case <-sess.closed:
			h.fail(w, sess, wt, p, http.StatusNotFound, sessionNotFound())
			return
		case <-timer.C:
			h.fail(w, sess, wt, p, http.StatusGatewayTimeout, h.timeoutError(p, wt))
			return
		case <-r.Context().Done():
			h.fail(w, sess, wt, p, 0, nil)
			return
		}
	}
	select {
	case <-wt.done:
	case <-sess.closed:
	case <-timer.C:
	case <-r.Context().Done():
	}
	h.answer(w, r, sess, wt, p)
}

// answer writes the responses if they all arrived, else fails the POST.
func (h *sseHandler) answer(w http.ResponseWriter, r *http.Request, sess *httpSession, wt *postWaiter, p *postPlan) {
	select {
	case <-wt.done:
	default:
		switch {
		case r.Context().Err() != nil:
			h.fail(w, sess, wt, p, 0, nil)
		case sess.isClosed():
			h.fail(w, sess, wt, p, http.StatusNotFound, sessionNotFound())
		default:
			h.fail(w, sess, wt, p, http.StatusGatewayTimeout, h.timeoutError(p, wt))
		}
		return
	}
	var body []byte
	if p.batch {
		body = append(body, '[')
		for _, sl := range p.slots {
			if out := p.answerFor(sl, wt); out != nil {
				if len(body) > 1 {
					body = append(body, ',')
				}
				body = append(body, out...)
			}
		}
		body = append(body, ']')
		if len(body) == 2 {
			body = nil
		}
	} else {
		body = p.answerFor(p.slots[0], wt)
	}
	if body == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	writeRPC(w, http.StatusOK, body, nil, nil)
}

func (p *postPlan) answerFor(sl postSlot, wt *postWaiter) []byte {
	if sl.local != nil {
		return sl.local
	}
	if sl.id != "" {
		return wt.resp[sl.id] // present: done was closed
	}
	return nil
}

// fail gives up on a POST: its responses (received or still to come) and
// local answers go to the event stream; status 0 writes nothing.
func (h *sseHandler) fail(w http.ResponseWriter, sess *httpSession, wt *postWaiter, p *postPlan, status int, e *Error) {
	var orphans [][]byte
	for _, sl := range p.slots {
		if sl.local != nil {
			orphans = append(orphans, sl.local)
		}
	}
	sess.abandon(wt, orphans)
	if status != 0 {
		writeRPC(w, status, nil, nil, e)
	}
}

// timeoutError names the requests whose responses will come on the stream.
func (h *sseHandler) timeoutError(p *postPlan, wt *postWaiter) *Error {
	var pending []json.RawMessage
	for _, sl := range p.slots {
		if sl.id != "" {
			pending = append(pending, json.RawMessage(sl.id))
		}
	}
	return NewError(CodeInternal, "Timed out waiting for the response; it will be delivered on GET /map/events").
		WithDetails(map[string]any{"pendingIds": pending})
}

// markTaken turns batch elements whose id another POST awaits into local
// errors (they are not fed to the Conn).
func (p *postPlan) markTaken(taken map[string]bool) {
	for k := range p.slots {
		sl := &p.slots[k]
		if sl.id != "" && taken[sl.id] {
			e := NewError(CodeInvalidRequest, "Request id already in flight in this HTTP session")
			sl.local, _ = appendResponse(nil, []byte(sl.id), nil, e)
			sl.id = ""
		}
	}
}

// feed returns the frame for the Conn's reader: the body itself, or for a
// batch a fresh array of the elements not answered here; nil if none.
func (p *postPlan) feed() []byte {
	if !p.batch {
		if p.slots[0].local != nil {
			return nil
		}
		return p.slots[0].elem
	}
	out := []byte{'['}
	for _, sl := range p.slots {
		if sl.local != nil {
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, sl.elem...)
	}
	if len(out) == 1 {
		return nil
	}
	return append(out, ']')
}
