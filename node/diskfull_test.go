package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/rpc"
)

// A write on a node whose disk is full answers a retryable 4000 with
// details.reason "disk_full" (not -32603), /v1/ready names the disk, and
// writes work again once space returns, with every acknowledged write kept.
func TestServer_DiskFullAnswersRetryable(t *testing.T) {
	var full atomic.Bool
	dir := t.TempDir()
	cfg := node.DevConfig(dir)
	cfg.Raft.LogWriteFault = func() error {
		if full.Load() {
			return fmt.Errorf("write %s/raft.db: %w", dir, syscall.ENOSPC)
		}
		return nil
	}
	srv := startConfig(t, cfg)
	c := dial(t, srv)
	c.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent"})
	c.call("map/agents/register", map[string]any{"agentId": "before"})

	full.Store(true)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	_, err := c.conn.Call(ctx, "map/agents/register", map[string]any{"agentId": "during"})
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeExhausted || re.Data == nil || !re.Data.Retryable ||
		re.Data.Details["reason"] != "disk_full" {
		t.Fatalf("register on a full disk = %#v, want retryable 4000 with reason disk_full", err)
	}
	code, body := get(t, srv, "/v1/ready")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "disk full") || !strings.Contains(body, dir) {
		t.Fatalf("/v1/ready on a full disk: %d %s, want 503 naming the disk", code, body)
	}

	full.Store(false)
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := c.conn.Call(ctx, "map/agents/register", map[string]any{"agentId": "after"})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes did not recover: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // retry pacing, as a client would
	}
	if code, body := get(t, srv, "/v1/ready"); code != http.StatusOK {
		t.Fatalf("/v1/ready after recovery: %d %s", code, body)
	}
	for _, id := range []string{"before", "after"} {
		c.call("map/agents/get", map[string]any{"agentId": id})
	}
}

func get(t *testing.T, srv *node.Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + srv.HTTPAddr() + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
