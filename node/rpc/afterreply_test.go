package rpc

import (
	"context"
	"strings"
	"testing"
)

// afterReplyHandler answers "subscribe" and, through AfterReply, pushes a
// notification that must reach the client after the reply.
type afterReplyHandler struct{ registered chan bool }

func (h *afterReplyHandler) Handle(ctx context.Context, c *Conn, req *Request) (any, error) {
	ok := AfterReply(ctx, func() { _ = c.Notify("pushed", map[string]string{"after": req.Method}) })
	h.registered <- ok
	return map[string]string{"subscriptionId": "s1"}, nil
}
func (h *afterReplyHandler) Closed(*Conn) {}

func TestAfterReply_NotificationFollowsReply(t *testing.T) {
	h := &afterReplyHandler{registered: make(chan bool, 4)}
	_, url := startServer(t, testConfig(t), h)
	ws := rawDial(t, url)
	for _, frame := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"subscribe"}`,
		`[{"jsonrpc":"2.0","id":2,"method":"subscribe"}]`,
	} {
		first := string(roundTrip(t, ws, frame))
		if !strings.Contains(first, `"subscriptionId":"s1"`) {
			t.Fatalf("first frame after %s is not the reply: %s", frame, first)
		}
		if second := string(readFrame(t, ws)); !strings.Contains(second, `"method":"pushed"`) {
			t.Fatalf("second frame is not the notification: %s", second)
		}
		if !<-h.registered {
			t.Fatal("AfterReply refused inside a handler")
		}
	}
}

func TestAfterReply_OutsideHandlerRefused(t *testing.T) {
	if AfterReply(context.Background(), func() { t.Error("ran") }) {
		t.Fatal("AfterReply accepted a context that is not a handler's")
	}
}
