package stdio

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/concordmap/concord/node/internal/testlog"
	"github.com/concordmap/concord/node/rpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds every wait in these tests.
const testTimeout = 10 * time.Second

// testHandler is the node behind the bridge: echo, note, push (server
// notifications) and whatever onHandle claims; anything else is -32601.
type testHandler struct {
	onHandle func(ctx context.Context, c *rpc.Conn, req *rpc.Request) (any, error, bool)
}

func newTestHandler() *testHandler { return &testHandler{} }

func (h *testHandler) Handle(ctx context.Context, c *rpc.Conn, req *rpc.Request) (any, error) {
	if h.onHandle != nil {
		if res, err, ok := h.onHandle(ctx, c, req); ok {
			return res, err
		}
	}
	switch req.Method {
	case "echo":
		return req.Params, nil
	case "note":
		return nil, nil
	}
	return nil, rpc.NewError(rpc.CodeMethodNotFound, "Method not found: "+req.Method)
}

func (h *testHandler) Closed(*rpc.Conn) {}

// pushHook answers "push" {n, from} with n map/event notifications first.
func pushHook(_ context.Context, c *rpc.Conn, req *rpc.Request) (any, error, bool) {
	if req.Method != "push" {
		return nil, nil, false
	}
	var p struct{ N, From int }
	_ = json.Unmarshal(req.Params, &p)
	for i := range p.N {
		if err := c.Notify("map/event", map[string]any{"n": p.From + i}); err != nil {
			return nil, err, true
		}
	}
	return map[string]any{"pushed": p.N}, nil, true
}

func pushBody(id, n, from int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"push","params":{"n":%d,"from":%d}}`, id, n, from)
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func testServerConfig(t *testing.T) rpc.Config {
	cfg := rpc.DefaultConfig()
	cfg.Logger = testLogger(t)
	cfg.CloseGracePeriod = 200 * time.Millisecond
	return cfg
}

func wsURL(base string) string { return "ws" + strings.TrimPrefix(base, "http") + "/map" }
