package rpctest

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/concordmap/concord/node/rpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The doubles over a real in-process server: attaching registers the
// server side of the caller's connection, a notification sent on it
// reaches the client's Inbox, and other requests are refused.
func TestSessionsAndInbox(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sessions := NewSessions()
	srv, err := rpc.NewServer(rpc.DefaultConfig(), sessions)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Shutdown(ctx) }()
	box := NewInbox("test/note", 4)
	cli, err := srv.ServeConn(ctx, box)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sessions.Conn("s1"); ok {
		t.Fatal("s1 attached before the attach call")
	}
	if _, err := cli.Call(ctx, AttachMethod, map[string]string{"session": "s1"}); err != nil {
		t.Fatal(err)
	}
	var e *rpc.Error
	if _, err := cli.Call(ctx, "other", nil); !errors.As(err, &e) || e.Code != rpc.CodeMethodNotFound {
		t.Fatalf("other method: %v, want method not found", err)
	}
	conn, ok := sessions.Conn("s1")
	if !ok {
		t.Fatal("s1 not attached")
	}
	if err := conn.Notify("ignored/note", map[string]int{"n": 0}); err != nil {
		t.Fatal(err)
	}
	if err := conn.Notify("test/note", map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-box.C:
		if string(got) != `{"n":1}` {
			t.Fatalf("inbox got %s", got)
		}
	case <-ctx.Done():
		t.Fatal("notification not received")
	}
	_ = cli.Close("bye")
	<-cli.Done()
}
