package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/concordmap/concord/node/cluster"
)

// sourcedServer parses args like `concord server`, applies env and the
// config file, and returns the flags and where each value came from.
func sourcedServer(t *testing.T, env map[string]string, args ...string) (*cobra.Command, *serverFlags, map[string]source, error) {
	t.Helper()
	f := &serverFlags{}
	cmd := &cobra.Command{Use: "server"}
	f.bind(cmd)
	if err := cmd.ParseFlags(args); err != nil {
		return nil, nil, nil, err
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	src, err := applySources(cmd.Flags(), lookup)
	f.changed = cmd.Flags().Changed
	return cmd, f, src, err
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "concord.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfig_Precedence(t *testing.T) {
	file := writeFile(t, `
node-id: from-file
system-id: file-sys
data-dir: /var/lib/concord
join: [10.0.0.1:7703, "10.0.0.2:7703"]
bootstrap-expect: 3
dead-server-cleanup: 2m
leave-on-shutdown: true
max-frame-bytes: 2048
insecure: true
`)
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		nodeID  string
		join    []string
		cleanup time.Duration
		src     map[string]source
	}{
		{
			name: "file only", args: []string{"--config", file},
			nodeID: "from-file", join: []string{"10.0.0.1:7703", "10.0.0.2:7703"}, cleanup: 2 * time.Minute,
			src: map[string]source{"node-id": fromFile, "join": fromFile, "http-addr": fromDefault},
		},
		{
			name: "env beats file", args: []string{"--config", file},
			env:    map[string]string{"CONCORD_NODE_ID": "from-env", "CONCORD_JOIN": "a:1,b:2", "CONCORD_DEAD_SERVER_CLEANUP": "5m"},
			nodeID: "from-env", join: []string{"a:1", "b:2"}, cleanup: 5 * time.Minute,
			src: map[string]source{"node-id": fromEnv, "join": fromEnv, "system-id": fromFile},
		},
		{
			name: "flag beats env and file", args: []string{"--config", file, "--node-id", "from-flag", "--join", "c:3"},
			env:    map[string]string{"CONCORD_NODE_ID": "from-env"},
			nodeID: "from-flag", join: []string{"c:3"}, cleanup: 2 * time.Minute,
			src: map[string]source{"node-id": fromFlag, "join": fromFlag},
		},
		{
			name: "file named by CONCORD_CONFIG", env: map[string]string{"CONCORD_CONFIG": file},
			nodeID: "from-file", join: []string{"10.0.0.1:7703", "10.0.0.2:7703"}, cleanup: 2 * time.Minute,
			src: map[string]source{"node-id": fromFile},
		},
		{
			name: "env without a file", env: map[string]string{"CONCORD_NODE_ID": "n9", "CONCORD_DATA_DIR": "/d", "CONCORD_INSECURE": "true", "CONCORD_OPERATOR_TOKEN": "not a flag: ignored"},
			nodeID: "n9", cleanup: 30 * time.Second,
			src: map[string]source{"node-id": fromEnv, "join": fromDefault, "insecure": fromEnv},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, f, src, err := sourcedServer(t, tt.env, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			cfg, cleanup, err := f.config()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cleanup)
			if cfg.NodeID != tt.nodeID || strings.Join(cfg.Join, " ") != strings.Join(tt.join, " ") || cfg.Cluster.DeadServerCleanupDelay != tt.cleanup {
				t.Fatalf("node %q join %v cleanup %v", cfg.NodeID, cfg.Join, cfg.Cluster.DeadServerCleanupDelay)
			}
			for k, want := range tt.src {
				if src[k] != want {
					t.Errorf("source of %s = %s, want %s", k, src[k], want)
				}
			}
		})
	}
}

func TestConfig_Errors(t *testing.T) {
	tests := []struct {
		name, file string
		env        map[string]string
		wantErr    string
	}{
		{"unknown key", "node-id: a\nnode_id: b\n", nil, `line 2: unknown key "node_id" (did you mean "node-id"?`},
		{"unknown key in camel case", "dataDir: /d\n", nil, `unknown key "dataDir" (did you mean "data-dir"?`},
		{"unknown key like no flag", "colour: blue\n", nil, `unknown key "colour" (keys are`},
		{"operator token as a value", "operator-token: hunter2\n", nil, "secrets are not accepted as values: put it in a file readable only by the server and set operator-token-file"},
		{"config key in file", "config: other.yaml\n", nil, `unknown key "config"`},
		{"print-config in file", "print-config: true\n", nil, `unknown key "print-config"`},
		{"duplicate key", "node-id: a\nnode-id: b\n", nil, "given twice"},
		{"nested map", "raft:\n  multiplier: 3\n", nil, `unknown key "raft"`},
		{"removed (hidden) flag", "gossip-key: c2VjcmV0\n", nil, `unknown key "gossip-key" (secrets are not accepted as values`},
		{"map value", "node-id:\n  a: b\n", nil, "node-id: want a value or a list"},
		{"null value", "node-id:\n", nil, "node-id: no value"},
		{"bad duration", "dead-server-cleanup: soon\n", nil, "dead-server-cleanup"},
		{"bad int", "bootstrap-expect: three\n", nil, "bootstrap-expect"},
		{"not a mapping", "- a\n- b\n", nil, "want a mapping"},
		{"two documents", "node-id: a\n---\nnode-id: b\n", nil, "more than one YAML document"},
		{"not yaml", "node-id: [a\n", nil, "not valid YAML"},
		{"bad env value", "", map[string]string{"CONCORD_BOOTSTRAP_EXPECT": "x"}, "CONCORD_BOOTSTRAP_EXPECT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, _, err := sourcedServer(t, tt.env, "--config", writeFile(t, tt.file))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			for _, secret := range []string{"hunter2", "c2VjcmV0"} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the error shows the secret: %v", err)
				}
			}
		})
	}
	if _, _, _, err := sourcedServer(t, nil, "--config", filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("a missing config file must be an error")
	}
	if _, _, _, err := sourcedServer(t, nil, "--config", writeFile(t, "# only a comment\n")); err != nil {
		t.Fatalf("an empty config file: %v", err)
	}
}

func TestConfig_PrintRedactsSecrets(t *testing.T) {
	file := writeFile(t, "node-id: n1\ngossip-key-file: /etc/concord/gossip.key\njoin: [a:1, 'b:2']\n")
	cmd, _, src, err := sourcedServer(t, map[string]string{"CONCORD_SYSTEM_ID": "prod"}, "--config", file, "--dev")
	if err != nil {
		t.Fatal(err)
	}
	// A secret-named flag added later is redacted too, a path flag is not.
	for _, name := range []string{"operator-token", "tls-key-file"} {
		if cmd.Flags().Lookup(name) == nil {
			cmd.Flags().String(name, "", "")
		}
	}
	_ = cmd.Flags().Set("operator-token", "hunter2")
	_ = cmd.Flags().Set("jwt-jwks-url", "https://svc:pa55word@issuer.example/jwks.json?api_key=k3y")
	_ = cmd.Flags().Set("tls-key-file", "/etc/concord/key.pem")
	var out bytes.Buffer
	if err := printConfig(&out, cmd.Flags(), src, nil); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"gossip-key-file: /etc/concord/gossip.key  # file", "node-id: n1  # file", "system-id: prod  # env", "dev: true  # flag",
		`join: ['a:1', 'b:2']  # file`, `operator-token: "<redacted>"`, "tls-key-file: /etc/concord/key.pem",
		"http-addr: 0.0.0.0:7700  # default",
		`jwt-jwks-url: "https://redacted@issuer.example/jwks.json?redacted"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("print-config lacks %q:\n%s", want, got)
		}
	}
	for _, leak := range []string{"hunter2", "pa55word", "k3y"} {
		if strings.Contains(got, leak) {
			t.Fatalf("print-config leaks a secret:\n%s", got)
		}
	}
	// A gossip key or operator token from the environment is named, not shown.
	for env, want := range map[string]string{
		gossipKeyEnv:     `# gossip key: "<redacted>"  # env CONCORD_GOSSIP_KEY` + "\n",
		operatorTokenEnv: `# operator token: "<redacted>"  # env CONCORD_OPERATOR_TOKEN` + "\n",
		metricsTokenEnv:  `# metrics token: "<redacted>"  # env CONCORD_METRICS_TOKEN` + "\n",
		"":               "",
	} {
		out.Reset()
		if err := printSecretEnv(&out, func(k string) (string, bool) { return "c2VjcmV0LWtleS0xNmJ5dGU=", k == env }); err != nil {
			t.Fatal(err)
		}
		if out.String() != want || strings.Contains(out.String(), "c2VjcmV0") {
			t.Errorf("env %q: printed %q, want %q", env, out.String(), want)
		}
	}
	// The output is itself a valid config file giving the same values.
	cmd, _, src, err = sourcedServer(t, nil, "--config", file, "--dev")
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := printConfig(&out, cmd.Flags(), src, nil); err != nil {
		t.Fatal(err)
	}
	again := writeFile(t, strings.ReplaceAll(out.String(), `"<redacted>"`, `""`))
	cmd2, _, _, err := sourcedServer(t, nil, "--config", again)
	if err != nil {
		t.Fatalf("print-config output is not a valid config file: %v\n%s", err, out.String())
	}
	for _, name := range []string{"node-id", "join", "dev", "http-addr"} {
		if a, b := cmd.Flags().Lookup(name).Value.String(), cmd2.Flags().Lookup(name).Value.String(); a != b {
			t.Errorf("%s: %q printed, %q read back", name, a, b)
		}
	}
}

func TestConfig_SessionDetachGrace(t *testing.T) {
	env := map[string]string{"CONCORD_NODE_ID": "n1", "CONCORD_DATA_DIR": "/d", "CONCORD_INSECURE": "true"}
	tests := []struct {
		name    string
		args    []string
		want    time.Duration
		wantErr string
	}{
		{"default", nil, cluster.DefaultSessionDetachGrace, ""},
		{"set", []string{"--session-detach-grace", "500ms"}, 500 * time.Millisecond, ""},
		{"zero detaches at once", []string{"--session-detach-grace", "0s"}, 0, ""},
		{"negative", []string{"--session-detach-grace", "-1s"}, 0, "--session-detach-grace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, f, _, err := sourcedServer(t, env, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			cfg, cleanup, err := f.config()
			if cleanup != nil {
				t.Cleanup(cleanup)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Cluster.SessionDetachGrace != tt.want {
				t.Fatalf("SessionDetachGrace = %s, want %s", cfg.Cluster.SessionDetachGrace, tt.want)
			}
		})
	}
}

// The operator token comes from one place: a file and the environment
// together are refused (one would be silently ignored), as for the gossip key.
func TestConfig_OperatorTokenGivenTwice(t *testing.T) {
	tokenFile := writeFile(t, "file-token\n")
	base := []string{"--node-id", "n1", "--data-dir", t.TempDir(), "--insecure"}
	t.Setenv(operatorTokenEnv, "env-token")
	if _, err := serverConfig(t, append(base, "--operator-token-file", tokenFile)...); err == nil ||
		!strings.Contains(err.Error(), "operator token given twice") || strings.Contains(err.Error(), "token\n") {
		t.Fatalf("file and env: %v", err)
	}
	cfg, err := serverConfig(t, base...)
	if err != nil || string(cfg.OperatorToken) != "env-token" {
		t.Fatalf("env only: %q, %v", cfg.OperatorToken, err)
	}
	if v, ok := os.LookupEnv(operatorTokenEnv); ok {
		t.Fatalf("%s still set after it was read: %q", operatorTokenEnv, v)
	}
}

// With --dev, print-config shows what a dev node runs with (loopback
// addresses, anonymous agents and clients, open reads, no TLS), not the
// flags' defaults, except where a flag, the environment or the file set
// a value.
func TestConfig_PrintDev(t *testing.T) {
	cmd, f, src, err := sourcedServer(t, map[string]string{"CONCORD_GRPC_ADDR": "127.0.0.1:9701"}, "--dev", "--node-id", "mine")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := printConfig(&out, cmd.Flags(), src, f.devSettings()); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"http-addr: 127.0.0.1:7700  # dev\n", "grpc-addr: 127.0.0.1:9701  # env\n", "node-id: mine  # flag\n",
		"system-id: dev  # dev\n", "allow-anonymous: [agent, client]  # dev\n", "http-open-reads: true  # dev: always with --dev\n",
		"insecure: true  # dev: without TLS material\n", "bootstrap: true  # dev", `data-dir: ""  # dev: a temporary directory`,
		"raft-multiplier: 5  # dev: not applied",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("print-config --dev lacks %q:\n%s", want, got)
		}
	}
	// What it shows is what the node is given.
	cfg, cleanup, err := f.config()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	if cfg.HTTPAddr != "127.0.0.1:7700" || cfg.GRPCAddr != "127.0.0.1:9701" || cfg.NodeID != "mine" || cfg.SystemID != "dev" ||
		!cfg.OpenReads || !cfg.Insecure || !cfg.Bootstrap || strings.Join(cfg.ACL.AnonymousTypes, ",") != "agent,client" {
		t.Fatalf("dev config %+v", cfg)
	}
}

// print-config ends with whether the settings would start a server, as a
// comment (the output stays a config file); settings a start would refuse
// also make it fail (exit status 1) after printing them, with the reason.
func TestConfig_PrintValidity(t *testing.T) {
	t.Setenv(gossipKeyEnv, "")
	os.Unsetenv(gossipKeyEnv)
	dir := t.TempDir()
	tests := []struct {
		args    []string
		last    string
		invalid bool
	}{
		{[]string{"--raft-voters", "4"}, "# not valid: --raft-voters 4: use 3 or 5", true},
		{[]string{"--node-id", "n1", "--data-dir", dir}, "# not valid: TLS material is required", true},
		{[]string{"--node-id", "n1", "--data-dir", dir, "--insecure", "--gossip-key-file", filepath.Join(dir, "none")}, "# not valid: --gossip-key-file: read", true},
		{[]string{"--node-id", "n1", "--data-dir", dir, "--insecure"}, "# valid as far as checked without starting", false},
		{[]string{"--dev"}, "# valid as far as checked without starting", false},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, err := execRoot(t, append([]string{"server", "--print-config"}, tt.args...)...)
			switch {
			case tt.invalid && !errors.Is(err, errSettingsInvalid):
				t.Fatalf("print-config of invalid settings: error %v, want %v\n%s", err, errSettingsInvalid, out)
			case tt.invalid && !strings.Contains(err.Error(), strings.TrimPrefix(tt.last, "# not valid: ")):
				t.Fatalf("error %q lacks the reason %q", err, tt.last)
			case !tt.invalid && err != nil:
				t.Fatalf("print-config: %v", err)
			}
			if !strings.Contains(out, "node-id: ") {
				t.Fatalf("print-config did not print the settings:\n%s", out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if last := lines[len(lines)-1]; !strings.HasPrefix(last, tt.last) {
				t.Fatalf("last line %q, want %q", last, tt.last)
			}
		})
	}
}

// A CONCORD_ variable that spells a flag's variable another way is named
// with the one meant; the right ones and unrelated CONCORD_ variables are
// not.
func TestConfig_EnvTypos(t *testing.T) {
	f := &serverFlags{}
	cmd := &cobra.Command{Use: "server"}
	f.bind(cmd)
	got := envTypos(cmd.Flags(), []string{
		"CONCORD_NODEID=n1", "CONCORD_DATA-DIR=/d", "concord_raft_voters=3", "CONCORD_CONFIGFILE=x",
		"CONCORD_NODE_ID=n1", "CONCORD_CA_FILE=/ca.pem", "CONCORD_GOSSIP_KEY=k", "CONCORD_OPERATOR_TOKEN=t", "CONCORDX=1", "PATH=/bin",
	})
	want := []string{
		"environment variable CONCORD_DATA-DIR sets nothing: did you mean CONCORD_DATA_DIR?",
		"environment variable CONCORD_NODEID sets nothing: did you mean CONCORD_NODE_ID?",
		"environment variable concord_raft_voters sets nothing: did you mean CONCORD_RAFT_VOTERS?",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A URL with a password is refused on the command line (argv is public)
// and accepted from the environment or the config file.
func TestConfig_URLCredentialsNotOnArgv(t *testing.T) {
	const withPass = "https://svc:pa55@issuer.example/jwks.json"
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr string
	}{
		{"flag with a password", nil, []string{"--jwt-jwks-url", withPass}, "--jwt-jwks-url: secrets are not accepted on the command line"},
		{"flag with a user only", nil, []string{"--jwt-jwks-url", "https://svc@issuer.example/jwks.json"}, ""},
		{"flag without credentials", nil, []string{"--jwt-jwks-url", "https://issuer.example/jwks.json"}, ""},
		{"environment", map[string]string{"CONCORD_JWT_JWKS_URL": withPass}, nil, ""},
		{"config file", nil, []string{"--config", writeFile(t, "jwt-jwks-url: "+withPass+"\n")}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd, _, src, err := sourcedServer(t, tt.env, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			err = refuseURLCredentialsOnArgv(cmd.Flags(), src)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "pa55") {
				t.Fatalf("err = %v, want %q without the password", err, tt.wantErr)
			}
		})
	}
}

// The metrics token: from a file or the environment (not both), unset
// once read, and never the operator token.
func TestConfig_MetricsToken(t *testing.T) {
	base := []string{"--node-id", "n1", "--data-dir", t.TempDir(), "--insecure"}
	file := writeFile(t, "scrape-token\n")
	cfg, err := serverConfig(t, append(base, "--metrics-token-file", file)...)
	if err != nil || string(cfg.MetricsToken) != "scrape-token" {
		t.Fatalf("from a file: %q, %v", cfg.MetricsToken, err)
	}
	t.Setenv(metricsTokenEnv, "env-scrape")
	if _, err := serverConfig(t, append(base, "--metrics-token-file", file)...); err == nil || !strings.Contains(err.Error(), "metrics token given twice") {
		t.Fatalf("file and env: %v", err)
	}
	cfg, err = serverConfig(t, base...)
	if err != nil || string(cfg.MetricsToken) != "env-scrape" {
		t.Fatalf("from the env: %q, %v", cfg.MetricsToken, err)
	}
	if _, ok := os.LookupEnv(metricsTokenEnv); ok {
		t.Fatalf("%s still set after it was read", metricsTokenEnv)
	}
	same := writeFile(t, "same\n")
	t.Setenv(operatorTokenEnv, "same")
	if _, err := serverConfig(t, append(base, "--metrics-token-file", same)...); err == nil || !strings.Contains(err.Error(), "the metrics token is the operator token") {
		t.Fatalf("metrics token = operator token: %v", err)
	}
}
