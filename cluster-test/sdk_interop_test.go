package clustertest

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore/testlog"
)

// sdkInteropDir holds the pinned official TypeScript SDK and the interop
// script, relative to this package's directory (go test runs there).
const sdkInteropDir = "sdk"

// sdkInteropSummary is the closing line interop.mjs prints.
var sdkInteropSummary = regexp.MustCompile(`(?m)^(\d+) passed, (\d+) failed, (\d+) skipped$`)

// sdkInteropFail matches one failed check line.
var sdkInteropFail = regexp.MustCompile(`(?m)^FAIL `)

// requireSDK returns the node binary, failing (or skipping under -short) with
// the command that installs the SDK when it is missing: CI runs that command,
// so a missing install there is a real failure, not a reason to skip.
func requireSDK(t *testing.T) string {
	t.Helper()
	missing := func(what string) {
		msg := what + ": run `make sdk-deps` (needs node >= 18 and npm) to install the pinned @multi-agent-protocol/sdk"
		if testing.Short() {
			t.Skip(msg)
		}
		t.Fatal(msg)
	}
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		missing("node is not on PATH")
	}
	pkg := filepath.Join(sdkInteropDir, "node_modules", "@multi-agent-protocol", "sdk", "package.json")
	if _, err := os.Stat(pkg); err != nil {
		missing("the SDK is not installed (" + pkg + " missing)")
	}
	return nodeBin
}

// TestSDKInterop_SingleNode runs the official MAP TypeScript SDK, unchanged,
// against one in-process dev node over wss:// (the SDK trusts the test CA
// through NODE_EXTRA_CA_CERTS): ClientConnection + two AgentConnections
// connect, register, list, exchange a message and its reply, subscribe to
// agent events and resume a session after an abrupt socket loss. The checks
// live in sdk/interop.mjs; its PASS/FAIL lines are the test's diagnostics.
func TestSDKInterop_SingleNode(t *testing.T) {
	nodeBin := requireSDK(t)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	cfg := node.DevConfig(t.TempDir())
	issuer := NewIssuer(t)
	cfg.ACL.JWT = issuer.JWTConfig()
	cfg.TLS, cfg.Insecure = tlstest.Server(cfg.SystemID, cfg.NodeID), false
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, cfg.TLS.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, err := node.New(cfg)
	if err != nil {
		t.Fatalf("node.New: %v", err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatalf("node Start: %v", err)
	}
	t.Cleanup(func() {
		// The test's ctx may be spent by now; shutdown gets its own budget.
		sctx, scancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer scancel()
		if err := srv.Shutdown(sctx); err != nil {
			t.Errorf("node Shutdown: %v", err)
		}
	})

	// Credentials for the auth checks: an API key for clients and a JWT
	// for the participant "interop-jwt" (agent or client).
	key, err := srv.ACLAdmin().CreateToken(ctx, &concordv1.AclCreateTokenRequest{
		ParticipantIdPattern: "interop-key-*", ParticipantTypes: []string{"client"}, Description: "sdk interop"})
	if err != nil {
		t.Fatalf("create API key: %v", err)
	}
	bearer := issuer.Token("interop-jwt", "interop-jwt", "agent", "client")

	runSDKScript(ctx, t, nodeBin, "interop.mjs", []string{srv.MAPURL()},
		"NODE_EXTRA_CA_CERTS="+caFile, "INTEROP_BEARER="+bearer, "INTEROP_API_KEY="+key.GetToken())
}

// runSDKScript runs one of the sdk/*.mjs checks with node and fails t
// unless it printed a summary of checks that ran, with none failed or
// skipped. The script has its own 30 s deadline; the context is the
// backstop if node itself wedges, and WaitDelay bounds waiting for its
// pipes.
func runSDKScript(ctx context.Context, t *testing.T, nodeBin, script string, args []string, env ...string) {
	t.Helper()
	runCtx, runCancel := context.WithTimeout(ctx, 45*time.Second)
	defer runCancel()
	cmd := exec.CommandContext(runCtx, nodeBin, append([]string{script}, args...)...)
	cmd.Dir = sdkInteropDir
	cmd.Env = append(append(os.Environ(), "INTEROP_TIMEOUT_MS=30000", "NO_COLOR=1"), env...)
	cmd.WaitDelay = 5 * time.Second
	out, runErr := cmd.CombinedOutput()
	output := string(out)

	if runErr != nil {
		var exitErr *exec.ExitError
		switch {
		case errors.Is(runCtx.Err(), context.DeadlineExceeded):
			t.Fatalf("%s killed after 45 s\n%s", script, output)
		case errors.As(runErr, &exitErr):
			t.Fatalf("%s exited %d; failing checks are the FAIL lines:\n%s", script, exitErr.ExitCode(), output)
		default:
			t.Fatalf("run %s: %v\n%s", script, runErr, output)
		}
	}
	// Exit status 0 alone is not trusted: the summary must show checks that
	// ran, none failed and none skipped.
	m := sdkInteropSummary.FindStringSubmatch(output)
	switch {
	case m == nil:
		t.Fatalf("%s printed no summary line\n%s", script, output)
	case m[1] == "0" || m[2] != "0" || m[3] != "0":
		t.Fatalf("%s summary %q\n%s", script, m[0], output)
	case sdkInteropFail.MatchString(output):
		t.Fatalf("%s printed FAIL lines\n%s", script, output)
	}
	t.Logf("%s:\n%s", script, output)
}
