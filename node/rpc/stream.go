package rpc

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync"
)

// streamTransport carries NDJSON: one JSON-RPC message per '\n'-terminated
// line. It serves the stdio transport (subprocess agents) and in-process
// pipes. There is no ping and no close frame: ending the stream is the close.
type streamTransport struct {
	name     string
	remote   string
	r        *bufio.Reader
	w        *bufio.Writer
	rc, wc   io.Closer // may be nil
	maxFrame int64
	line     []byte // reader goroutine only

	rOnce, wOnce sync.Once
}

// newStreamTransport reads lines from r and writes them to w. r and w are
// closed at teardown if they implement io.Closer.
func newStreamTransport(name, remote string, r io.Reader, w io.Writer, maxFrame int64) *streamTransport {
	t := &streamTransport{
		name:     name,
		remote:   remote,
		r:        bufio.NewReaderSize(r, 64<<10),
		w:        bufio.NewWriterSize(w, 64<<10),
		maxFrame: maxFrame,
	}
	t.rc, _ = r.(io.Closer)
	t.wc, _ = w.(io.Closer)
	return t
}

func (t *streamTransport) kind() string       { return t.name }
func (t *streamTransport) remoteAddr() string { return t.remote }

// readMessage returns the next non-blank line without its terminator. A
// final line without '\n' before EOF still counts.
func (t *streamTransport) readMessage() ([]byte, error) {
	for {
		line, err := t.readLine()
		if err != nil {
			return nil, err
		}
		if skipSpace(line, 0) < len(line) {
			return bytes.Clone(line), nil
		}
	}
}

func (t *streamTransport) readLine() ([]byte, error) {
	t.line = t.line[:0]
	var tl *tooLargeError
	for {
		chunk, err := t.r.ReadSlice('\n')
		switch {
		case tl != nil:
			// discarding the rest of an oversized line
		case int64(len(t.line)+len(bytes.TrimSuffix(chunk, []byte{'\n'}))) > t.maxFrame:
			// The terminator does not count; a last line without one is
			// held to the same limit.
			t.line = append(t.line, chunk[:min(len(chunk), idPrefixBytes)]...)
			tl = &tooLargeError{limit: t.maxFrame, prefix: bytes.Clone(t.line[:min(len(t.line), idPrefixBytes)])}
			t.line = t.line[:0]
		default:
			t.line = append(t.line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if cap(t.line) > readBufKeep {
			defer func() { t.line = nil }()
		}
		if tl != nil {
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, err
			}
			return nil, tl
		}
		if err != nil && (len(t.line) == 0 || !errors.Is(err, io.EOF)) {
			return nil, err
		}
		return t.line, nil
	}
}

// writeMessages writes each frame as one line and flushes once. A raw
// newline can only be insignificant whitespace in valid JSON (inside strings
// it must be escaped), so it is blanked to keep the line framing intact;
// frames are owned by the writer, so this edits in place.
func (t *streamTransport) writeMessages(frames []*frame) error {
	for _, f := range frames {
		if bytes.IndexByte(f.b, '\n') >= 0 {
			for i, c := range f.b {
				if c == '\n' {
					f.b[i] = ' '
				}
			}
		}
		if _, err := t.w.Write(f.b); err != nil {
			return err
		}
		if err := t.w.WriteByte('\n'); err != nil {
			return err
		}
	}
	return t.w.Flush()
}

func (t *streamTransport) ping() error { return nil }

// sendClose ends our half of the stream: the peer reads EOF, which is the
// NDJSON way of saying goodbye. It fails when w cannot be closed, so the
// caller does not wait for an answer that cannot come.
func (t *streamTransport) sendClose(int, string) error {
	if t.wc == nil {
		return errTransportClosed
	}
	var err error
	t.wOnce.Do(func() { err = t.wc.Close() })
	return err
}

// close closes the reader and the writer (if they are io.Closers), which is
// what unblocks a pending Read.
func (t *streamTransport) close() error {
	var err error
	if t.rc != nil {
		t.rOnce.Do(func() { err = t.rc.Close() })
	}
	if t.wc != nil {
		t.wOnce.Do(func() {
			if e := t.wc.Close(); err == nil {
				err = e
			}
		})
	}
	return err
}
