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
		t.Fatalf("%d registrations left after the child ended", len(left))
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
