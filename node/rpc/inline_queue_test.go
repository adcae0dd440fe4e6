package rpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestWriteInline_QueueStates: a reply put into an idle queue by its producer
// (putOwn, then writeInline: what putInline does on a WebSocket) is
// written before it returns, with no writer goroutine started; with a writer already
// running it is only queued (that writer writes it); what is due after
// the write (a ping here) goes to a writer started for it; a closed
// queue refuses the frame, which the caller keeps.
func TestWriteInline_QueueStates(t *testing.T) {
	tests := []struct {
		name        string
		setup       func(q *sendQueue)
		wantErr     error
		wantWritten bool
		wantStarts  int
	}{
		{"idle queue", func(*sendQueue) {}, nil, true, 0},
		{"writer running", func(q *sendQueue) { q.writing = true }, nil, false, 0},
		{"ping due", func(q *sendQueue) { q.pingDue = true }, nil, true, 1},
		{"closed", func(q *sendQueue) { q.closed = true }, ErrClosed, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			var out bytes.Buffer // written by this goroutine only: no writer runs
			c := newConn(context.Background(), &cfg, newStreamTransport(kindInProcess, "test", bytes.NewReader(nil), &out, cfg.MaxFrameBytes), nil)
			starts := 0
			c.q.startWriter = func() { starts++ } // counted, not run: the test is the only goroutine
			tt.setup(c.q)
			f := getFrame()
			f.b = append(f.b[:0], `{"jsonrpc":"2.0","id":1,"result":true}`...)
			err := putOwnAndWrite(c, f)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("putOwn+writeInline: %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				putFrame(f) // the caller's, as handleFrame does
			}
			written := out.String() == `{"jsonrpc":"2.0","id":1,"result":true}`+"\n"
			if written != tt.wantWritten {
				t.Errorf("written = %v (%q), want %v", written, out.String(), tt.wantWritten)
			}
			if starts != tt.wantStarts {
				t.Errorf("writers started: %d, want %d", starts, tt.wantStarts)
			}
			if !tt.wantWritten && tt.wantErr == nil && len(c.q.frames) != 1 {
				t.Errorf("%d frames queued, want the reply", len(c.q.frames))
			}
			if tt.wantWritten && tt.wantStarts == 0 && c.q.writing {
				t.Error("the queue still shows a writer running after the inline write")
			}
		})
	}
}

// TestWS_FirstReplyThenMore: the first message's reply (written by the
// reader) and the replies and notifications after it arrive complete and
// in order, also when the handler of the first message queues a
// notification before its reply.
func TestWS_FirstReplyThenMore(t *testing.T) {
	h := newTestHandler()
	h.onHandle = func(_ context.Context, c *Conn, req *Request) (any, error, bool) {
		if req.Method != "hello" {
			return nil, nil, false
		}
		if err := c.Notify("greeting", map[string]int{"n": 1}); err != nil {
			return nil, err, true
		}
		return "hi", nil, true
	}
	_, url := startServer(t, testConfig(t), h)
	ws := rawDial(t, url)
	if err := ws.WriteMessage(1, []byte(`{"jsonrpc":"2.0","id":1,"method":"hello"}`)); err != nil {
		t.Fatal(err)
	}
	if got := string(readFrame(t, ws)); got != `{"jsonrpc":"2.0","method":"greeting","params":{"n":1}}` {
		t.Fatalf("first frame %s, want the notification queued before the reply", got)
	}
	if r := decodeResp(t, readFrame(t, ws)); r.Error != nil || string(r.Result) != `"hi"` {
		t.Fatalf("first reply: %+v", r)
	}
	for i := 2; i < 5; i++ {
		if r := decodeResp(t, roundTrip(t, ws, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"hello"}`, i))); r.Error != nil {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
}

// putOwnAndWrite is putInline without its transport check (the test's
// conn is in-process).
func putOwnAndWrite(c *Conn, f *frame) error {
	own, err := c.q.putOwn(context.Background(), f)
	if own {
		c.writeInline()
	}
	return err
}
