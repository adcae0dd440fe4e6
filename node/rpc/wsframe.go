package rpc

import (
	"encoding/binary"

	"github.com/gorilla/websocket"
)

// Outbound data frames bypass the WebSocket library: the writer goroutine
// appends each frame (header + payload) straight into the corkConn's gather
// buffer. Through the library every frame took its write lock, borrowed and
// returned a pooled write buffer (an allocation per frame) and was copied
// twice; here it is copied once. The bytes on the wire are the same: a
// server's text frame, FIN set, unmasked, uncompressed (compression is never
// negotiated), one frame per message.

const (
	wsFinText     = 0x80 | websocket.TextMessage
	maxWSHeaderSz = 10
)

// appendWSHeader appends the header of an unmasked final text frame
// carrying n payload bytes (RFC 6455 §5.2).
func appendWSHeader(b []byte, n int) []byte {
	switch {
	case n <= 125:
		return append(b, wsFinText, byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, wsFinText, 126), uint16(n))
	default:
		return binary.BigEndian.AppendUint64(append(b, wsFinText, 127), uint64(n))
	}
}

// writeTextFrames writes frames as text messages with as few write(2)
// calls as corkLimit allows. The lock is held for the whole burst, so a
// control frame the library writes from another goroutine (a pong) lands
// between two whole frames, never inside one.
func (c *corkConn) writeTextFrames(frames []*frame) error {
	bp := corkBufPool.Get().(*[]byte)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closeSent {
		corkBufPool.Put(bp)
		return websocket.ErrCloseSent
	}
	c.buf = (*bp)[:0]
	err := c.appendFramesLocked(frames)
	if err == nil {
		err = c.flushLocked()
	}
	if cap(c.buf) == corkLimit {
		b := c.buf[:0]
		corkBufPool.Put(&b)
	}
	c.buf = nil
	return err
}

func (c *corkConn) appendFramesLocked(frames []*frame) error {
	for _, f := range frames {
		n := len(f.b)
		if len(c.buf)+maxWSHeaderSz+n > corkLimit {
			if err := c.flushLocked(); err != nil {
				return err
			}
		}
		c.buf = appendWSHeader(c.buf, n)
		if maxWSHeaderSz+n <= corkLimit {
			c.buf = append(c.buf, f.b...)
			continue
		}
		// A payload larger than the gather buffer: header first, then
		// the payload straight from the frame.
		if err := c.flushLocked(); err != nil {
			return err
		}
		if _, err := c.writeLocked(f.b); err != nil {
			return err
		}
	}
	return nil
}
