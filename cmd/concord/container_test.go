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
	// One stage on an empty base: the image builds offline, with nothing
	// to pull (build.sh builds the binary on the host).
	var froms []string
	byCmd := map[string]instruction{}
	var copies []instruction
	for _, in := range ins {
		switch in.cmd {
		case "FROM":
			froms = append(froms, in.args)
		case "RUN":
			t.Errorf("line %d: RUN needs a shell in the image, which has none", in.line)
		case "COPY", "ADD":
			copies = append(copies, in)
		}
		byCmd[in.cmd] = in // the last one counts, as in a build
	}
	if !slices.Equal(froms, []string{"scratch"}) {
		t.Fatalf("FROM %v, want one stage FROM scratch (no base image to pull)", froms)
	}

	// The user is non-root and has a passwd and a group entry; the data
	// dir is copied owned by it.
	user, group, _ := strings.Cut(byCmd["USER"].args, ":")
	if user == "" || user == "root" || user == "0" || group == "" || group == "0" {
		t.Errorf("the image runs as %q, want a non-root USER uid:gid", byCmd["USER"].args)
	}
	for file, entry := range map[string]string{"passwd": ":x:" + user + ":" + group + ":", "group": ":x:" + group + ":"} {
		b, err := os.ReadFile(filepath.Join(deployDir, "container", "rootfs", "etc", file))
		if err != nil || !strings.Contains(string(b), entry) {
			t.Errorf("deploy/container/rootfs/etc/%s has no entry for %s (%v)", file, byCmd["USER"].args, err)
		}
	}
	dataOwned := slices.ContainsFunc(copies, func(in instruction) bool {
		f := strings.Fields(in.args)
		return len(f) == 3 && f[0] == "--chown="+user+":"+group && f[2] == "/var/lib/"
	})
	if !dataOwned || byCmd["WORKDIR"].args != "/var/lib/concord" {
		t.Errorf("the data dir is not copied to /var/lib/ owned by %s:%s, or is not the WORKDIR", user, group)
	}

	// The entrypoint is the binary the context's concord is copied to.
	var binary string
	for _, in := range copies {
		if f := strings.Fields(in.args); len(f) == 2 && f[0] == "concord" {
			binary = f[1]
		}
	}
	entry := execForm(t, byCmd["ENTRYPOINT"])
	if binary == "" || len(entry) != 1 || entry[0] != binary {
		t.Errorf("ENTRYPOINT %v, want [%q], where concord is copied", entry, binary)
	}

	// build.sh builds that binary statically and runs the build in the
	// docker format, which keeps the HEALTHCHECK (make image-check runs
	// the result).
	script, err := os.ReadFile(filepath.Join(deployDir, "container", "build.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "node.Version=", "./cmd/concord", "--format docker"} {
		if !strings.Contains(string(script), want) {
			t.Errorf("deploy/container/build.sh lacks %q", want)
		}
	}

	// The health check runs `concord health` with flags it has.
	hc := byCmd["HEALTHCHECK"]
	_, argv, ok := strings.Cut(hc.args, "CMD ")
	if !ok {
		t.Fatal("no HEALTHCHECK CMD in the Containerfile")
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
