package rpc

import (
	"bytes"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/concordmap/concord/node/internal/jsonkit"
)

// httpSession is one HTTP+SSE session. It is the transport of its Conn:
// POSTs hand frames to the Conn's reader through inbound, and the Conn's
// writer routes every outbound message either to the POST waiting for it
// (a response whose id it registered) or to the event buffer that the
// session's stream writes out.
//
// Goroutines: the Conn's reader calls readMessage, its writer calls
// writeMessages and sendClose; POST handlers, the stream's GET handler and
// the idle timer call the rest. All state below mu is guarded by it.
type httpSession struct {
	id     string
	h      *sseHandler
	remote string
	ip     string // clientIP(remote), the key of sseHandler.perIP
	conn   *Conn  // set once before the session is published

	inbound   chan []byte   // unbuffered: a POST hands its frame to the reader
	readEOF   chan struct{} // closed by sendClose: the reader ends cleanly
	closed    chan struct{} // closed by close: the transport is gone
	eofOnce   sync.Once
	closeOnce sync.Once

	mu       sync.Mutex
	waiters  map[string]*postWaiter // raw JSON request id -> the POST awaiting its response
	events   []sseEvent             // oldest first; seqs are consecutive
	evBytes  int64
	nextSeq  uint64        // seq of the next event appended (first is 1)
	written  uint64        // highest seq any stream has written
	changed  chan struct{} // closed and replaced on every append and at close
	stream   *sseStream    // the attached stream, nil if none
	active   int           // POSTs (and stream-creating GETs) being served
	idle     *time.Timer   // fires expire; armed only while nothing is active
	idleFrom time.Time     // when the session last became inactive
}

// sseEvent is one message bound for the event stream.
type sseEvent struct {
	seq  uint64
	name string
	data []byte // one line: raw newlines blanked
}

// postWaiter collects the responses one POST waits for.
type postWaiter struct {
	pending int
	resp    map[string][]byte
	done    chan struct{} // closed when pending reaches 0
}

// sseStream is one attached GET /map/events.
type sseStream struct {
	stop chan struct{} // closed (once, by halt) when replaced or when HTTP shuts down
	once sync.Once
}

func newHTTPSession(h *sseHandler, id, remote string) *httpSession {
	return &httpSession{
		id:      id,
		h:       h,
		remote:  remote,
		inbound: make(chan []byte),
		readEOF: make(chan struct{}),
		closed:  make(chan struct{}),
		waiters: make(map[string]*postWaiter),
		nextSeq: 1,
		changed: make(chan struct{}),
		active:  1,
	}
}

// transport implementation (see transport.go for the contract).

func (s *httpSession) kind() string       { return kindHTTPSSE }
func (s *httpSession) remoteAddr() string { return s.remote }
func (s *httpSession) ping() error        { return nil }

func (s *httpSession) readMessage() ([]byte, error) {
	select {
	case b := <-s.inbound:
		return b, nil
	case <-s.readEOF:
		return nil, io.EOF
	case <-s.closed:
		return nil, errTransportClosed
	}
}

// writeMessages never blocks on the client: responses go to their POST or
// to the bounded event buffer. Blocking here would stall every POST's
// responses behind a client that never opened its event stream.
func (s *httpSession) writeMessages(frames []*frame) error {
	s.mu.Lock()
	for _, f := range frames {
		s.routeLocked(f.b)
	}
	s.broadcastLocked()
	s.mu.Unlock()
	return nil
}

// sendClose queues the map.close event and lets the reader end: there is no
// peer goodbye to wait for on HTTP.
func (s *httpSession) sendClose(code int, reason string) error {
	data := append([]byte(`{"code":`), strconv.Itoa(code)...)
	data = jsonkit.AppendString(append(data, `,"reason":`...), reason)
	data = append(data, '}')
	s.mu.Lock()
	s.appendLocked(sseCloseEvent, data)
	s.broadcastLocked()
	s.mu.Unlock()
	s.eofOnce.Do(func() { close(s.readEOF) })
	return nil
}

// close ends the session: POSTs and the stream see closed (the stream
// writes what is buffered, then returns) and the handler forgets the id.
func (s *httpSession) close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.h.remove(s)
		s.mu.Lock()
		if s.idle != nil {
			s.idle.Stop()
		}
		s.broadcastLocked()
		s.mu.Unlock()
	})
	return nil
}

func (s *httpSession) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// routeLocked sends one outbound frame's messages where they belong. A
// batch reply is split so that each event carries one JSON-RPC message.
func (s *httpSession) routeLocked(b []byte) {
	if len(s.waiters) == 0 && !bytes.HasPrefix(b, []byte("[")) {
		s.appendLocked(sseEventName, b) // the hot path: notifications
		return
	}
	for _, elem := range splitMessages(b) {
		if m, derr := decodeObject(elem); derr == nil && m.kind == kindResponse && m.id != nil {
			if w := s.waiters[string(m.id)]; w != nil {
				delete(s.waiters, string(m.id))
				w.resp[string(m.id)] = bytes.Clone(elem)
				if w.pending--; w.pending == 0 {
					close(w.done)
				}
				continue
			}
		}
		s.appendLocked(sseEventName, elem)
	}
}

// appendLocked buffers one event (copying data: frames are recycled) and
// drops the oldest ones past the bounds.
func (s *httpSession) appendLocked(name string, data []byte) {
	ev := sseEvent{seq: s.nextSeq, name: name, data: oneLine(data)}
	s.nextSeq++
	s.events = append(s.events, ev)
	s.evBytes += int64(len(ev.data))
	for len(s.events) > 1 && (len(s.events) > s.h.cfg.BufferEvents || s.evBytes > s.h.cfg.BufferBytes) {
		s.evBytes -= int64(len(s.events[0].data))
		s.events[0] = sseEvent{}
		s.events = s.events[1:]
	}
}

func (s *httpSession) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// oneLine copies data with raw CR and LF blanked. In valid JSON they can
// only be insignificant whitespace (inside strings they are escaped), and an
// SSE data line must not contain them.
func oneLine(data []byte) []byte {
	out := bytes.Clone(data)
	for i, c := range out {
		if c == '\n' || c == '\r' {
			out[i] = ' '
		}
	}
	return out
}

// splitMessages returns the elements of a JSON array, or b itself for
// anything else. b is valid JSON (we encoded it).
func splitMessages(b []byte) [][]byte {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return [][]byte{b}
	}
	var out [][]byte
	i = skipSpace(b, i+1)
	for i < len(b) && b[i] != ']' {
		e, err := scanValue(b, i, 1)
		if err != nil {
			return out
		}
		out = append(out, b[i:e])
		i = skipSpace(b, e)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return out
}

// begin marks the session active (a POST or stream-creating GET is being
// served): it cannot expire meanwhile.
func (s *httpSession) begin() {
	s.mu.Lock()
	s.active++
	s.mu.Unlock()
}

// end undoes begin; the idle clock starts when nothing is active.
func (s *httpSession) end() {
	s.mu.Lock()
	s.active--
	s.armIdleLocked()
	s.mu.Unlock()
}

func (s *httpSession) armIdleLocked() {
	if s.active > 0 || s.stream != nil || s.isClosed() {
		return
	}
	s.idleFrom = time.Now()
	if s.idle == nil {
		s.idle = time.AfterFunc(s.h.cfg.IdleTimeout, s.expire)
	} else {
		s.idle.Reset(s.h.cfg.IdleTimeout)
	}
}

// expire closes the session if it has really been idle for IdleTimeout
// (a timer that fired just as activity resumed and ended is ignored).
func (s *httpSession) expire() {
	s.mu.Lock()
	idle := s.active == 0 && s.stream == nil && time.Since(s.idleFrom) >= s.h.cfg.IdleTimeout
	s.mu.Unlock()
	if idle {
		s.h.log.Debug("http session idle, closing", "conn_id", s.conn.ID())
		_ = s.conn.closeWith(closeGoingAway, "http session idle")
	}
}

// register records the POST waiting for the responses to ids. It returns
// the ids already awaited by another POST of this session (those cannot be
// told apart and are refused).
func (s *httpSession) register(w *postWaiter, ids []string) (taken map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if s.waiters[id] != nil {
			if taken == nil {
				taken = make(map[string]bool)
			}
			taken[id] = true
			continue
		}
		s.waiters[id] = w
		w.pending++
	}
	if w.pending == 0 {
		close(w.done)
	}
	return taken
}

// abandon stops w from receiving responses. Whatever it did receive, and
// the local answers in orphans, go to the event stream: every response
// that is not in a POST's body is on the stream.
func (s *httpSession) abandon(w *postWaiter, orphans [][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, ww := range s.waiters {
		if ww == w {
			delete(s.waiters, id)
		}
	}
	for _, r := range w.resp {
		s.appendLocked(sseEventName, r)
	}
	for _, r := range orphans {
		s.appendLocked(sseEventName, r)
	}
	s.broadcastLocked()
}
