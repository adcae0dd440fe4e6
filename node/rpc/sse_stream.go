package rpc

import (
	"bufio"
	"net/http"
	"strconv"
	"time"
)

// serveEvents handles GET /map/events: it attaches the session's event
// stream (replacing an older one) and writes events until the client goes,
// the stream is replaced, HTTP shuts down or the session closes (after its
// last events, map.close included, are written).
func (h *sseHandler) serveEvents(w http.ResponseWriter, r *http.Request) {
	created := r.Header.Get(SessionHeader) == "" && r.URL.Query().Get("session") == ""
	sess, status, serr := h.sessionFor(r, true)
	if serr != nil {
		writeRPC(w, status, nil, nil, serr)
		return
	}
	st, cursor := sess.attach(lastEventID(r))
	sess.end() // from here the attached stream keeps the session alive
	defer sess.detach(st)

	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	hdr.Set(SessionHeader, sess.id)
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{w: bufio.NewWriterSize(w, 4<<10), rc: http.NewResponseController(w), timeout: h.srv.cfg.WriteTimeout}
	sw.arm()
	if created {
		sw.event(0, sseSessionEvent, []byte(`{"session":"`+sess.id+`"}`))
	}
	sw.comment("stream open")
	if sw.flush() != nil {
		return
	}
	hb := time.NewTicker(h.cfg.HeartbeatInterval)
	defer hb.Stop()
	for {
		// Checked before collecting: once closed, the writer has stopped, so
		// this round writes the last events.
		closed := sess.isClosed()
		evs, gapFrom, gapTo, next, changed := sess.collect(cursor)
		sw.arm()
		if gapFrom != 0 {
			sw.event(0, sseGapEvent, []byte(`{"from":`+strconv.FormatUint(gapFrom, 10)+`,"to":`+strconv.FormatUint(gapTo, 10)+`}`))
		}
		for _, ev := range evs {
			sw.event(ev.seq, ev.name, ev.data)
		}
		if gapFrom != 0 || len(evs) > 0 {
			if sw.flush() != nil {
				return
			}
			sess.markWritten(next - 1)
			cursor = next
		}
		if closed {
			return // everything the session will ever send is written
		}
		select {
		case <-changed:
		case <-st.stop:
			return
		case <-r.Context().Done():
			return
		case <-hb.C:
			sw.arm()
			sw.comment("ping")
			if sw.flush() != nil {
				return
			}
		}
	}
}

// lastEventID reads the SSE reconnection header (or the lastEventId query
// parameter, for clients that reconnect by hand); nil when absent or bad.
func lastEventID(r *http.Request) *uint64 {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("lastEventId")
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return nil
	}
	return &n
}

// attach makes st the session's only stream and returns where it starts:
// after Last-Event-ID when given, else at the first event no stream wrote.
func (s *httpSession) attach(last *uint64) (*sseStream, uint64) {
	st := &sseStream{stop: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stream != nil {
		s.stream.halt()
	}
	s.stream = st
	cursor := s.written + 1
	if last != nil {
		cursor = min(*last+1, s.nextSeq)
	}
	return st, cursor
}

// detach forgets st if it is still the session's stream; the idle clock
// starts when nothing else is active.
func (s *httpSession) detach(st *sseStream) {
	st.halt()
	s.mu.Lock()
	if s.stream == st {
		s.stream = nil
		s.armIdleLocked()
	}
	s.mu.Unlock()
}

// detachAll ends the attached stream (HTTP server shutdown).
func (s *httpSession) detachAll() {
	s.mu.Lock()
	if s.stream != nil {
		s.stream.halt()
	}
	s.mu.Unlock()
}

func (st *sseStream) halt() { st.once.Do(func() { close(st.stop) }) }

// collect returns the buffered events from seq cursor on, the range of
// sequence numbers dropped before the stream could write them (0, 0 if
// none), the cursor after them and the channel closed on the next change.
// Event data is never modified after buffering, so sharing it is safe.
func (s *httpSession) collect(cursor uint64) (evs []sseEvent, gapFrom, gapTo, next uint64, changed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := s.nextSeq - uint64(len(s.events))
	if cursor < first {
		gapFrom, gapTo, cursor = cursor, first-1, first
	}
	if cursor < s.nextSeq {
		evs = append([]sseEvent(nil), s.events[cursor-first:]...)
	}
	return evs, gapFrom, gapTo, s.nextSeq, s.changed
}

// markWritten records that events up to seq reached a stream.
func (s *httpSession) markWritten(seq uint64) {
	s.mu.Lock()
	s.written = max(s.written, seq)
	s.mu.Unlock()
}

// sseWriter formats SSE fields into a buffer and writes them to the
// client, each round under a write deadline (arm). The first error sticks.
type sseWriter struct {
	w       *bufio.Writer
	rc      *http.ResponseController
	timeout time.Duration
	err     error
}

func (sw *sseWriter) event(seq uint64, name string, data []byte) {
	if seq != 0 {
		sw.write("id: ", strconv.FormatUint(seq, 10), "\n")
	}
	sw.write("event: ", name, "\ndata: ")
	if sw.err == nil {
		_, sw.err = sw.w.Write(data)
	}
	sw.write("\n\n")
}

func (sw *sseWriter) comment(text string) { sw.write(": ", text, "\n\n") }

func (sw *sseWriter) write(parts ...string) {
	for _, p := range parts {
		if sw.err == nil {
			_, sw.err = sw.w.WriteString(p)
		}
	}
}

// arm sets the deadline for the next round of writes. The node's
// http.Server has no WriteTimeout (it would cut long streams), so a client
// that stops reading is bounded here.
func (sw *sseWriter) arm() { _ = sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout)) }

func (sw *sseWriter) flush() error {
	if sw.err == nil {
		sw.err = sw.w.Flush()
	}
	if sw.err == nil {
		sw.err = sw.rc.Flush()
	}
	return sw.err
}
