package router

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/concordmap/concord/node/internal/rpctest"
	"github.com/concordmap/concord/node/rpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testTimeout = 10 * time.Second

func TestSend_RealConnection(t *testing.T) {
	reg, _ := world()
	sessions := rpctest.NewSessions()
	srv, err := rpc.NewServer(rpc.DefaultConfig(), sessions)
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
	box := rpctest.NewInbox(MethodMessage, 16)
	cli, err := srv.ServeConn(ctx, box)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Call(ctx, rpctest.AttachMethod, map[string]string{"session": "s-w2"}); err != nil {
		t.Fatal(err)
	}

	cfg := DefaultConfig()
	cfg.NodeID, cfg.Registry, cfg.Sessions = "n1", reg, sessions
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	payload := `{"text":"ok", "n":[1,2.50]}`
	res, err := r.Send(ctx, agentSender("w1"), json.RawMessage(`{"to":"w2","payload":`+payload+`,"meta":{"isResult":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-box.C:
		var env struct {
			Message struct {
				ID      string          `json:"id"`
				From    string          `json:"from"`
				Payload json.RawMessage `json:"payload"`
			} `json:"message"`
		}
		if err := json.Unmarshal(got, &env); err != nil {
			t.Fatal(err)
		}
		m := env.Message
		if m.ID != res.(*SendResult).MessageID || m.From != "w1" || string(m.Payload) != payload {
			t.Errorf("received %s", got)
		}
	case <-ctx.Done():
		t.Fatal("map/message not received")
	}

	// Once the connection is gone the recipient fails honestly.
	_ = cli.Close("bye")
	<-cli.Done()
	// The server side of the pipe notices the close asynchronously.
	eventually(t, testTimeout, func() error {
		_, err = r.Send(ctx, agentSender("w1"), json.RawMessage(`{"to":"w2"}`))
		if errCode(err) != rpc.CodeDeliveryFailed {
			return fmt.Errorf("send to a closed connection: %v", err)
		}
		return nil
	})
}

// eventually checks cond at once and then every 10 ms until it returns nil,
// failing the test with the last error after timeout.
func eventually(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		<-tick.C
	}
}
