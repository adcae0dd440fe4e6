package clustertest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore/testlog"
)

// readmeJS matches the README's ```js blocks.
var readmeJS = regexp.MustCompile("(?s)```js\n(.*?)```")

// TestREADME_Snippets runs every JavaScript snippet of README.md, as
// written, with the Node.js on PATH (the README names Node.js 20) against a
// dev node: only the address ws://127.0.0.1:7700/map is pointed at the test
// node, CONCORD_API_KEY holds a key made the way the README says
// (--participant 'worker-*' --types agent) and CONCORD_GATEWAY_KEY a
// gateway key (--participant gw-lab --types gateway --gateway-sources lab
// --gateway-targets dev).
func TestREADME_Snippets(t *testing.T) {
	nodeBin := requireSDK(t)
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	snippets := readmeJS.FindAllStringSubmatch(string(b), -1)
	if len(snippets) < 2 {
		t.Fatalf("README.md has %d js snippets, want the quickstart and the auth one", len(snippets))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cfg := node.DevConfig(t.TempDir())
	cfg.Logger = slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	key, err := srv.ACLAdmin().CreateToken(ctx, &concordv1.AclCreateTokenRequest{ParticipantIdPattern: "worker-*", ParticipantTypes: []string{"agent"}})
	if err != nil {
		t.Fatal(err)
	}
	gwKey, err := srv.ACLAdmin().CreateToken(ctx, &concordv1.AclCreateTokenRequest{ParticipantIdPattern: "gw-lab", ParticipantTypes: []string{"gateway"},
		GatewaySources: []string{"lab"}, GatewayTargets: []string{cfg.SystemID}})
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range snippets {
		code := strings.ReplaceAll(m[1], "ws://127.0.0.1:7700/map", srv.MAPURL())
		// The file must sit beside node_modules to resolve the SDK and ws.
		file := filepath.Join(sdkInteropDir, fmt.Sprintf("readme-snippet-%d.mjs", i+1))
		if err := os.WriteFile(file, []byte(code), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(file) })
		runCtx, runCancel := context.WithTimeout(ctx, 30*time.Second)
		cmd := exec.CommandContext(runCtx, nodeBin, filepath.Base(file))
		cmd.Dir = sdkInteropDir
		cmd.Env = append(os.Environ(), "CONCORD_API_KEY="+key.GetToken(), "CONCORD_GATEWAY_KEY="+gwKey.GetToken())
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		runCancel()
		if err != nil {
			t.Fatalf("README snippet %d failed: %v\n--- snippet\n%s--- output\n%s", i+1, err, m[1], out)
		}
		t.Logf("README snippet %d:\n%s", i+1, out)
	}
}
