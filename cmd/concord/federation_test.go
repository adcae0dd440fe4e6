package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/client/admin"
)

func TestReadPeeringToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, file, stdin, want, wantErr string
	}{
		{name: "file, whitespace trimmed", file: write("t", "  concordfed1.abc\n"), want: "concordfed1.abc"},
		{name: "stdin", file: "-", stdin: "concordfed1.xyz\n", want: "concordfed1.xyz"},
		{name: "empty file", file: write("e", " \n"), wantErr: "empty"},
		{name: "empty stdin", file: "-", wantErr: "empty"},
		{name: "missing file", file: filepath.Join(dir, "nope"), wantErr: "no such file"},
		{name: "too large", file: write("big", strings.Repeat("a", maxTokenBytes+1)), wantErr: "larger than"},
		{name: "no file", wantErr: "required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readPeeringToken(tt.file, strings.NewReader(tt.stdin))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %q, %v; want an error with %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// startDevSystem starts a dev node of its own system (own gossip key, so
// two systems on one host do not gossip together) and returns its gRPC
// address.
func startDevSystem(t *testing.T, sys string) string {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return startDevNodeWith(t, func(cfg *node.Config) {
		cfg.SystemID, cfg.NodeID = sys, sys+"-1"
		cfg.GossipPlaintext, cfg.GossipKey = false, key
	}).GRPCAddr()
}

// TestFederationLinkTokenFile: `federation link` takes the token from a
// file or stdin and refuses it as a flag value (argv leaks secrets).
func TestFederationLinkTokenFile(t *testing.T) {
	a, b := startDevSystem(t, "a"), startDevSystem(t, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := func(stdin string, args ...string) (string, error) {
		root := newRootCmd()
		var out, errOut bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errOut)
		root.SetIn(strings.NewReader(stdin))
		root.SetArgs(args)
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}
	token := func(peer, addr string) string {
		tok, err := run("", "federation", "token", "--peer", peer, "--export", "all", "--addr", addr)
		if err != nil || !strings.HasPrefix(tok, "concordfed1.") {
			t.Fatalf("token: %q %v", tok, err)
		}
		return tok
	}

	tok := token("a", b)
	if _, err := run("", "federation", "link", "--token", strings.TrimSpace(tok), "--addr", a); !errors.Is(err, errTokenFlag) {
		t.Fatalf("--token VALUE: %v, want the refusal", err)
	}
	if help, _ := run("", "federation", "link", "--help"); strings.Contains(help, "--token ") || !strings.Contains(help, "--peering-token-file") {
		t.Fatalf("help shows --token or lacks --peering-token-file:\n%s", help)
	}
	file := filepath.Join(t.TempDir(), "b.token")
	if err := os.WriteFile(file, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := run("", "federation", "link", "--peering-token-file", file, "--addr", a)
	if err != nil || !strings.Contains(out, "linked to b") {
		t.Fatalf("link from a file: %q %v", out, err)
	}
	if out, err := run("", "federation", "unlink", "b", "--addr", a); err != nil || !strings.Contains(out, "removed its side too") {
		t.Fatalf("unlink: %q %v", out, err)
	}
	// From stdin, as `federation token ... | federation link --peering-token-file -`.
	out, err = run(token("a", b), "federation", "link", "--peering-token-file", "-", "--guaranteed", "--outbox-messages", "5", "--addr", a)
	if err != nil || !strings.Contains(out, "linked to b") {
		t.Fatalf("link from stdin: %q %v", out, err)
	}
	if out, err := run("", "federation", "list", "--addr", a); err != nil || !strings.Contains(out, "guaranteed 5 msgs") {
		t.Fatalf("list: %q %v", out, err)
	}
}

// TestFederationLink_KindMap: `federation link --kind map` stores a link
// whose token list/status never print, and refuses bad flag sets before
// calling the node.
func TestFederationLink_KindMap(t *testing.T) {
	srv := startDevNode(t)
	addr := srv.GRPCAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	run := func(args ...string) (string, error) {
		root := newRootCmd()
		var out, errOut bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errOut)
		root.SetArgs(append(args, "--addr", addr))
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}
	const secret = "map_sk_very_secret_value"
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"no url":                 {"federation", "link", "--kind", "map", "--system-id", "ext"},
		"no system id":           {"federation", "link", "--kind", "map", "--url", "ws://127.0.0.1:1/map"},
		"peering token with map": {"federation", "link", "--kind", "map", "--system-id", "ext", "--url", "ws://127.0.0.1:1/map", "--peering-token-file", "x"},
		"unknown kind":           {"federation", "link", "--kind", "mesh"},
		"bad auth method":        {"federation", "link", "--kind", "map", "--system-id", "ext", "--url", "ws://127.0.0.1:1/map", "--auth-token-file", keyFile, "--auth-method", "basic"},
		"http url":               {"federation", "link", "--kind", "map", "--system-id", "ext", "--url", "http://127.0.0.1:1/map"},
		"missing file":           {"federation", "link", "--kind", "map", "--system-id", "ext", "--url", "ws://127.0.0.1:1/map", "--auth-token-file", keyFile + ".none"},
		"concord no token":       {"federation", "link"},
		"url with concord":       {"federation", "link", "--url", "ws://127.0.0.1:1/map"},
	} {
		if _, err := run(args...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	out, err := run("federation", "link", "--kind", "map", "--system-id", "ext", "--url", "ws://user:pw@127.0.0.1:1/map?k=v",
		"--auth-method", "api-key", "--auth-token-file", keyFile, "--export", "all")
	if err != nil || !strings.Contains(out, "linked to MAP system ext") {
		t.Fatalf("link: %q %v", out, err)
	}
	for _, cmd := range []string{"list", "status"} {
		out, err := run("federation", cmd)
		if err != nil || !strings.Contains(out, "ext") || !strings.Contains(out, "map") {
			t.Fatalf("%s: %q %v", cmd, out, err)
		}
		if strings.Contains(out, secret) || strings.Contains(out, "pw@") || strings.Contains(out, "k=v") {
			t.Fatalf("%s prints a secret: %q", cmd, out)
		}
	}
	checkStatusJSON(t, ctx, srv.HTTPAddr(), run, secret)
	if out, err := run("federation", "unlink", "ext"); err != nil || !strings.Contains(out, "a MAP server keeps no side") {
		t.Fatalf("unlink: %q %v", out, err)
	}
}

func TestPrintLinks_Gateways(t *testing.T) {
	res := admin.Links{SystemID: "dc1", NodeID: "n1", Gateways: []admin.GatewayBinding{
		{SystemID: "lab", SessionID: "S1", ParticipantID: "gw-lab", BoundAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}}
	for _, detail := range []bool{false, true} {
		var b strings.Builder
		if err := printLinks(&b, res, detail); err != nil {
			t.Fatal(err)
		}
		if want := "# gateway lab: served by SDK gateway session S1 (participant gw-lab) since 2026-01-02T03:04:05Z"; !strings.Contains(b.String(), want) {
			t.Fatalf("detail=%v: %q lacks %q", detail, b.String(), want)
		}
	}
}

// TestPrintLinks_Direct: status shows a concord link's direct streams and
// the envelopes on them; a map link has none; list does not show them.
func TestPrintLinks_Direct(t *testing.T) {
	res := admin.Links{SystemID: "dc1", NodeID: "n1", Links: []admin.LinkStatus{
		{Link: admin.Link{PeerSystemID: "dc2", Kind: "concord"}, State: "up", StreamsUp: 1,
			DirectStreams: 2, DirectSent: 345, DirectReceived: 67},
		{Link: admin.Link{PeerSystemID: "ext", Kind: "map"}, State: "up"},
	}}
	for _, tc := range []struct {
		detail   bool
		want     []string
		wantNone []string
	}{
		{detail: true, want: []string{"DIRECT", "2 up, 345 sent, 67 received"}},
		{detail: false, wantNone: []string{"DIRECT", "345 sent"}},
	} {
		var b strings.Builder
		if err := printLinks(&b, res, tc.detail); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("detail=%v: %q lacks %q", tc.detail, out, w)
			}
		}
		for _, w := range tc.wantNone {
			if strings.Contains(out, w) {
				t.Errorf("detail=%v: %q shows %q", tc.detail, out, w)
			}
		}
		if tc.detail && strings.Count(out, " up, ") != 1 {
			t.Errorf("the map link shows direct streams: %q", out)
		}
	}
}

// checkStatusJSON: `federation status --json` prints the links as GET
// /v1/federation/links serves them (the one link "ext", redacted, no
// secret), and `list` takes no --json.
func checkStatusJSON(t *testing.T, ctx context.Context, httpAddr string, run func(...string) (string, error), secret string) {
	t.Helper()
	out, err := run("federation", "status", "--json")
	if err != nil {
		t.Fatalf("status --json: %v", err)
	}
	if strings.Contains(out, secret) || strings.Contains(out, "pw@") || strings.Contains(out, "k=v") {
		t.Fatalf("status --json prints a secret: %q", out)
	}
	var cli admin.LinksJSON
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cli); err != nil {
		t.Fatalf("status --json is not the links object: %v\n%s", err, out)
	}
	if len(cli.Links) != 1 || cli.NodeID == "" {
		t.Fatalf("status --json: %+v, want one link and the node's id", cli)
	}
	if l := cli.Links[0]; l.PeerSystemID != "ext" || l.Kind != "map" || !strings.Contains(l.URL, "127.0.0.1:1/map") || l.Export != "all" {
		t.Fatalf("status --json link: %+v", l)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/v1/federation/links", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var api admin.LinksJSON
	if err := json.NewDecoder(res.Body).Decode(&api); err != nil {
		t.Fatalf("GET /v1/federation/links: %v", err)
	}
	// Counters may move between the two reads; who answered and the
	// link's identity and policies may not.
	if api.SystemID != cli.SystemID || api.NodeID != cli.NodeID || len(api.Links) != 1 ||
		api.Links[0].PeerSystemID != "ext" || api.Links[0].URL != cli.Links[0].URL || api.Links[0].Export != cli.Links[0].Export {
		t.Fatalf("status --json %+v differs from GET /v1/federation/links %+v", cli, api)
	}
	if _, err := run("federation", "list", "--json"); err == nil {
		t.Fatal("list --json accepted: only status prints JSON")
	}
}
