package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
)

// TestInlineWrites: a Call with nothing else queued is written by the
// caller, and a reply with no further request buffered by the reader that
// served it: one-in-flight traffic starts no writer goroutine on either
// side. Requests started in a burst (Start) and the replies to them still
// arrive whole and in order.
func TestInlineWrites(t *testing.T) {
	h := newTestHandler()
	_, url := startServer(t, testConfig(t), h)
	c := dialClient(t, url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	if _, err := c.Call(ctx, "echo", map[string]int{"n": -1}); err != nil {
		t.Fatal(err)
	}
	srv := recvConn(t, h.conns)
	c0, s0 := c.writerStarts.Load(), srv.writerStarts.Load()
	for i := range 50 {
		res, err := c.Call(ctx, "echo", map[string]int{"n": i})
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`{"n":%d}`, i); string(res) != want {
			t.Fatalf("call %d: got %s, want %s", i, res, want)
		}
	}
	if d := c.writerStarts.Load() - c0; d != 0 {
		t.Errorf("client started %d writer goroutines for 50 sequential calls, want 0", d)
	}
	if d := srv.writerStarts.Load() - s0; d != 0 {
		t.Errorf("server started %d writer goroutines for 50 sequential replies, want 0", d)
	}

	// Pipelined from several goroutines: every answer is its own.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ps []*Pending
			for i := range 20 {
				p, err := c.Start(ctx, "echo", map[string]int{"g": g, "i": i})
				if err != nil {
					errs <- err
					return
				}
				ps = append(ps, p)
			}
			for i, p := range ps {
				res, err := p.Wait(ctx)
				if err != nil {
					errs <- err
					return
				}
				var got struct{ G, I int }
				if err := json.Unmarshal(res, &got); err != nil || got.G != g || got.I != i {
					errs <- fmt.Errorf("goroutine %d request %d: got %s (%v)", g, i, res, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
