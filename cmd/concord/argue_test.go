package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func execRoot(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// execRootStdout runs the CLI like execRoot but keeps stderr apart, for
// commands whose stdout is parsed (progress lines go to stderr and may
// land at any moment of a run).
func execRootStdout(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.Execute()
	return out.String(), errOut.String(), err
}

func TestArgueRunLocal(t *testing.T) {
	dir := t.TempDir()
	out, err := execRoot(t, "argue", "run", "--local", "--task", "Adopt <X>?", "--agents", "a,b,c",
		"--request-id", "cli-1", "--min-rounds", "1", "--max-rounds", "2", "--composer", "representative", "--out", dir)
	if err != nil {
		t.Fatalf("argue run --local: %v\n%s", err, out)
	}
	if !strings.Contains(out, "session started: 3 participants") || !strings.Contains(out, "files in "+filepath.Join(dir, "cli-1")) {
		t.Fatalf("output:\n%s", out)
	}
	for _, f := range []string{"events.jsonl", "result.json", "summary.md"} {
		if _, err := os.Stat(filepath.Join(dir, "cli-1", f)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestArgueAndAgentFlagErrors(t *testing.T) {
	tests := []struct {
		args   []string
		errHas string
	}{
		{[]string{"argue", "run", "--task", "t", "--agents", "a,b", "--script", "x.json"}, "only apply with --local"},
		{[]string{"argue", "run", "--local", "--agents", "a,b"}, "task"},
		{[]string{"argue", "run", "--local", "--task", "t", "--agents", "a,b", "--clock", "sundial"}, "--clock"},
		{[]string{"argue", "run", "--local", "--task", "t", "--agents", "a"}, "participants"},
		{[]string{"agent", "--persona", "default"}, "--name is required"},
		{[]string{"agent", "--name", "a"}, "exactly one of"},
		{[]string{"agent", "--name", "a", "--persona", "default", "--exec", "true"}, "exactly one of"},
		{[]string{"agent", "--name", "a", "--persona", "grumpy"}, "unknown persona style"},
		{[]string{"agent", "--name", "a", "--persona", "default", "--think", "soon"}, "--think"},
		{[]string{"agent", "--name", "a", "--persona", "default", "--server", "http://x"}, "ws://"},
	}
	for _, tt := range tests {
		_, err := execRoot(t, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.errHas) {
			t.Errorf("%v: err = %v, want %q", tt.args, err, tt.errHas)
		}
	}
}
