package main

import (
	"strings"
	"testing"
)

// A command group refuses an unknown subcommand (exit status 1, with a
// suggestion) instead of printing its help and succeeding; with no
// argument it prints its help.
func TestRoot_UnknownSubcommands(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
		wantOut string
	}{
		{[]string{"snapshot", "sav", "backup.snap"}, `unknown command "sav" for "concord snapshot"; did you mean "save"?`, ""},
		{[]string{"operator", "helth"}, `unknown command "helth" for "concord operator"; did you mean "health"?`, ""},
		{[]string{"raft", "bogus"}, `unknown command "bogus" for "concord raft"`, ""},
		{[]string{"tls", "cert", "nope"}, `unknown command "nope" for "concord tls cert"`, ""},
		{[]string{"bogus"}, `unknown command "bogus" for "concord"`, ""},
		{[]string{"snapshot"}, "", "Available Commands:"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, err := execRoot(t, tt.args...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q (out %q)", err, tt.wantErr, out)
				}
				return
			}
			if err != nil || !strings.Contains(out, tt.wantOut) {
				t.Fatalf("out %q err %v, want %q", out, err, tt.wantOut)
			}
		})
	}
}
