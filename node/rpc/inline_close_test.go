package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestInlineWrites_RaceClose: Calls written inline by their callers, and
// replies written inline by the server's reader, race a Close from either
// side at varying moments. Every Call ends with its own answer or
// ErrClosed, and both ends of every connection finish their teardown (a
// frame returned to the pool twice, a writer flag left set or a second
// close of writerDone would show here as a wrong answer, a hang or a
// panic; run with -race).
func TestInlineWrites_RaceClose(t *testing.T) {
	const rounds, callers, calls = 100, 6, 20
	h := newTestHandler()
	h.conns = make(chan *Conn, rounds)
	h.closed = make(chan *Conn, 2*rounds) // Closed blocks on a full channel
	_, url := startServer(t, testConfig(t), h)
	for round := range rounds {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		c := dialClient(t, url, nil)
		if _, err := c.Call(ctx, "echo", map[string]int{"n": -1}); err != nil {
			t.Fatal(err)
		}
		srv := recvConn(t, h.conns)
		var wg sync.WaitGroup
		errs := make(chan error, callers)
		for g := range callers {
			wg.Go(func() {
				for i := range calls {
					res, err := c.Call(ctx, "echo", map[string]int{"g": g, "i": i})
					if errors.Is(err, ErrClosed) {
						return
					}
					var got struct{ G, I int }
					if err != nil || json.Unmarshal(res, &got) != nil || got.G != g || got.I != i {
						errs <- fmt.Errorf("round %d caller %d call %d: %s, %v", round, g, i, res, err)
						return
					}
				}
			})
		}
		// Jitter the close into different points of the calls' writes.
		time.Sleep(time.Duration(round%7) * 100 * time.Microsecond)
		if round%2 == 0 {
			_ = c.Close("client done")
		} else {
			_ = srv.Close("server done")
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for _, conn := range []*Conn{c, srv} {
			select {
			case <-conn.Done():
			case <-ctx.Done():
				t.Fatalf("round %d: a %s connection never finished its teardown", round, conn.Transport())
			}
		}
		cancel()
	}
}
