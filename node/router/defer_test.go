package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/concordmap/concord/node/rpc"
)

// heldPeers records submissions in order and completes each only when the
// test releases it, like a peer whose acknowledgement is still travelling.
type heldPeers struct {
	mu      sync.Mutex
	payload []string
	done    []func(error)
	arrived chan struct{}
}

func (r *heldPeers) Submit(_ context.Context, _ string, env *Envelope, done func(error)) {
	var m struct{ Payload json.RawMessage }
	_ = json.Unmarshal(env.Message, &m)
	r.mu.Lock()
	r.payload = append(r.payload, string(m.Payload))
	r.done = append(r.done, done)
	r.mu.Unlock()
	r.arrived <- struct{}{}
}

func (r *heldPeers) complete(i int, err error) {
	r.mu.Lock()
	done := r.done[i]
	r.mu.Unlock()
	done(err)
}

// sendHandler serves map/send from agent w1 through Router.HandleSend.
type sendHandler struct{ r *Router }

func (h sendHandler) Handle(ctx context.Context, _ *rpc.Conn, req *rpc.Request) (any, error) {
	return h.r.HandleSend(ctx, agentSender("w1"), req.Params)
}
func (sendHandler) Closed(*rpc.Conn) {}

// TestHandleSend_DefersRemoteDelivery: a send to an agent on another node
// answers when that node acknowledges, without holding up the sender's
// next requests; submissions keep the order of the requests; the peer's
// verdict becomes the failure reason.
func TestHandleSend_DefersRemoteDelivery(t *testing.T) {
	reg, conns := world()
	relay := &heldPeers{arrived: make(chan struct{}, 8)}
	r := testRouter(t, reg, conns, nil, relay)
	srv, err := rpc.NewServer(rpc.DefaultConfig(), sendHandler{r})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cli, err := srv.ServeConn(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close("done"); <-cli.Done() }()

	type answer struct {
		raw json.RawMessage
		err error
	}
	remote := make([]chan answer, 2)
	for i := range remote {
		remote[i] = make(chan answer, 1)
		go func() {
			raw, err := cli.Call(ctx, "map/send", json.RawMessage(fmt.Sprintf(`{"to":"far","payload":%d}`, i)))
			remote[i] <- answer{raw, err}
		}()
		select { // submitted in request order, one at a time
		case <-relay.arrived:
		case <-ctx.Done():
			t.Fatal("send not submitted to the relay")
		}
	}
	// The pending remote sends do not block a local one.
	raw, err := cli.Call(ctx, "map/send", json.RawMessage(`{"to":"w2"}`))
	if err != nil {
		t.Fatalf("local send behind deferred ones: %v", err)
	}
	var local SendResult
	if err := json.Unmarshal(raw, &local); err != nil || !slices.Equal(local.Delivered, []string{"w2"}) {
		t.Fatalf("local send: %s %v", raw, err)
	}
	if got := relay.payload; !slices.Equal(got, []string{"0", "1"}) {
		t.Fatalf("relay saw payloads %v, want request order", got)
	}

	relay.complete(1, fmt.Errorf("peer says: %w", ErrNotConnected))
	relay.complete(0, nil)
	a0 := <-remote[0]
	var res SendResult
	if a0.err != nil || json.Unmarshal(a0.raw, &res) != nil || !slices.Equal(res.Delivered, []string{"far"}) {
		t.Fatalf("first remote send: %s %v", a0.raw, a0.err)
	}
	a1 := <-remote[1]
	var e *rpc.Error
	if !errors.As(a1.err, &e) || e.Code != rpc.CodeDeliveryFailed {
		t.Fatalf("second remote send: %s %v, want 2003", a1.raw, a1.err)
	}
	if failed := fmt.Sprint(e.Data.Details["failed"]); failed != "[map[id:far reason:not_connected]]" {
		t.Fatalf("failed = %s", failed)
	}
}
