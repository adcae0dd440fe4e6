package rpc

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestConnCtx(t *testing.T) {
	c := &Conn{}
	base, cancelBase := context.WithCancel(context.WithValue(context.Background(), "k", "v"))
	defer cancelBase()
	c.ctx.init(base, c)
	ctx := &c.ctx
	if ctx.Value(handlerCtxKey{}) != c || ctx.Value("k") != "v" || ctx.Err() != nil {
		t.Fatal("values or Err wrong before cancel")
	}

	// A child that ends first leaves nothing registered.
	child, stop := context.WithTimeout(ctx, time.Hour)
	stop()
	<-child.Done()
	c.ctx.mu.Lock()
	left := c.ctx.afters
	c.ctx.mu.Unlock()
	if left != nil {
		t.Fatal("a registration left after the child ended")
	}

	// Children alive when the connection closes end with it.
	live, stopLive := context.WithTimeout(ctx, time.Hour)
	defer stopLive()
	after := make(chan struct{})
	context.AfterFunc(ctx, func() { close(after) })
	c.ctx.cancel()
	c.ctx.cancel() // idempotent
	for name, done := range map[string]<-chan struct{}{"child": live.Done(), "AfterFunc": after, "ctx": ctx.Done()} {
		select {
		case <-done:
		case <-time.After(testTimeout):
			t.Fatalf("%s not done after cancel", name)
		}
	}
	if !errors.Is(live.Err(), context.Canceled) || !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("errs %v %v", live.Err(), ctx.Err())
	}
	// Registering after the end runs at once.
	late := make(chan struct{})
	context.AfterFunc(ctx, func() { close(late) })
	<-late
}

func TestConnCtx_BaseEndCancels(t *testing.T) {
	c := &Conn{}
	base, cancelBase := context.WithCancel(context.Background())
	c.ctx.init(base, c)
	cancelBase()
	select {
	case <-c.ctx.Done():
	case <-time.After(testTimeout):
		t.Fatal("the base's end did not cancel the connection's context")
	}
}

// TestConnCtx_AfterFuncList: registrations stopped in any order leave the
// list consistent; at the end exactly the ones still registered run, and
// their stop then reports false.
func TestConnCtx_AfterFuncList(t *testing.T) {
	c := &Conn{}
	c.ctx.init(context.Background(), c)
	const n = 6
	ran := make([]chan struct{}, n)
	stops := make([]func() bool, n)
	for i := range n {
		ran[i] = make(chan struct{})
		stops[i] = c.ctx.AfterFunc(func() { close(ran[i]) })
	}
	for _, i := range []int{0, 3, 5} { // the oldest, a middle one, the newest
		if !stops[i]() {
			t.Fatalf("stop %d: false while registered", i)
		}
		if stops[i]() {
			t.Fatalf("stop %d twice: true", i)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { c.ctx.AfterFunc(func() {})() }); allocs > 2 {
		t.Errorf("AfterFunc and stop: %.0f allocations, want at most 2", allocs)
	}
	c.ctx.cancel()
	stopped := map[int]bool{0: true, 3: true, 5: true}
	for i := range n { // the live ones first: cancel started them all
		if !stopped[i] {
			select {
			case <-ran[i]:
			case <-time.After(testTimeout):
				t.Fatalf("registration %d did not run", i)
			}
		}
	}
	for i := range n {
		select {
		case <-ran[i]:
			if stopped[i] {
				t.Errorf("stopped registration %d ran", i)
			}
		default:
		}
		if stops[i]() {
			t.Errorf("stop %d after the end: true", i)
		}
	}
	if c.ctx.afters != nil {
		t.Error("registrations kept after the end")
	}
}
