package main

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/concordmap/concord/node"
)

// instruction is one Containerfile instruction with its arguments.
type instruction struct {
	line int
	cmd  string // upper case: FROM, RUN, ...
	args string
}

// parseContainerfile reads instructions, joining continuation lines and
// dropping comments (enough of the Dockerfile syntax for the checks below).
func parseContainerfile(t *testing.T, path string) []instruction {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []instruction
	var cur strings.Builder
	start := 0
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		cont := strings.HasSuffix(line, "\\")
		cur.WriteString(strings.TrimSuffix(line, "\\"))
		cur.WriteString(" ")
		if cont {
			continue
		}
		cmd, args, _ := strings.Cut(strings.TrimSpace(cur.String()), " ")
		out = append(out, instruction{line: start, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

// execForm decodes a JSON exec-form argument list (["a", "b"]).
func execForm(t *testing.T, in instruction) []string {
	t.Helper()
	var argv []string
	if err := json.Unmarshal([]byte(in.args), &argv); err != nil {
		t.Fatalf("line %d: %s must use the exec form [\"...\"]: %v", in.line, in.cmd, err)
	}
	return argv
}

func TestDeploy_Containerfile(t *testing.T) {
	ins := parseContainerfile(t, filepath.Join(deployDir, "container", "Containerfile"))
	var stages [][]instruction
	for _, in := range ins {
		if in.cmd == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) > 0 {
			stages[len(stages)-1] = append(stages[len(stages)-1], in)
		}
	}
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a build stage and a runtime stage", len(stages))
	}
	static := slices.ContainsFunc(stages[0], func(in instruction) bool {
		return in.cmd == "RUN" && strings.Contains(in.args, "CGO_ENABLED=0") && strings.Contains(in.args, "go build") &&
			strings.Contains(in.args, "./cmd/concord")
	})
	if !static {
		t.Error("the build stage does not build ./cmd/concord with CGO_ENABLED=0")
	}

	final := stages[len(stages)-1]
	byCmd := map[string]instruction{}
	for _, in := range final {
		byCmd[in.cmd] = in // the last one counts, as in a build
	}
	user := strings.Split(byCmd["USER"].args, ":")[0]
	if user == "" || user == "root" || user == "0" {
		t.Errorf("runtime stage runs as %q, want a non-root USER", byCmd["USER"].args)
	}
	copyArgs := strings.Fields(byCmd["COPY"].args)
	if len(copyArgs) < 3 || !strings.HasPrefix(copyArgs[0], "--from=") {
		t.Fatalf("runtime stage does not COPY --from the build stage: %q", byCmd["COPY"].args)
	}
	binary := copyArgs[len(copyArgs)-1]
	entry := execForm(t, byCmd["ENTRYPOINT"])
	if len(entry) != 1 || entry[0] != binary {
		t.Errorf("ENTRYPOINT %v, want [%q]", entry, binary)
	}

	// The health check runs `concord health` with flags it has.
	hc := byCmd["HEALTHCHECK"]
	_, argv, ok := strings.Cut(hc.args, "CMD ")
	if !ok {
		t.Fatal("no HEALTHCHECK CMD in the runtime stage")
	}
	health := execForm(t, instruction{line: hc.line, cmd: "HEALTHCHECK", args: argv})
	if len(health) < 2 || health[0] != binary || health[1] != "health" {
		t.Fatalf("HEALTHCHECK runs %v, want %s health ...", health, binary)
	}
	checkFlags(t, "HEALTHCHECK", newHealthCmd().Flags(), health[2:])

	// CMD runs the server with flags it has.
	cmd := execForm(t, byCmd["CMD"])
	if len(cmd) == 0 || cmd[0] != "server" {
		t.Fatalf("CMD %v does not run the server", cmd)
	}
	checkFlags(t, "CMD", serverFlagSet(t), cmd[1:])

	// Every default port is exposed (gossip on TCP and UDP).
	d := node.DefaultConfig()
	exposed := strings.Fields(byCmd["EXPOSE"].args)
	for _, addr := range []string{d.HTTPAddr, d.GRPCAddr, d.RaftAddr, d.GossipAddr} {
		_, port, _ := net.SplitHostPort(addr)
		if !slices.Contains(exposed, port+"/tcp") && !slices.Contains(exposed, port) {
			t.Errorf("port %s (%s) is not exposed: EXPOSE %v", port, addr, exposed)
		}
	}
	if _, port, _ := net.SplitHostPort(d.GossipAddr); !slices.Contains(exposed, port+"/udp") {
		t.Errorf("gossip port %s/udp is not exposed", port)
	}
	if !strings.Contains(byCmd["VOLUME"].args, "/var/lib/concord") {
		t.Error("the data dir is not a VOLUME")
	}
}
