package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadRolePermissions(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, body, wantErr string
		wantRoles           int
	}{
		{"yaml", "worker:\n  canSee:\n    agents: hierarchy\nlead: {}\n", "", 2},
		{"json", `{"worker":{"acceptsFrom":{"clients":"none"}}}`, "", 1},
		{"bad rule", "worker:\n  canSee:\n    agents: everyone\n", "worker.canSee.agents", 0},
		{"not an object", "- a\n- b\n", "object of role", 0},
		{"bad yaml", "worker: [\n", "parse", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			roles, err := readRolePermissions(p)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want it to mention %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(roles) != tc.wantRoles {
				t.Fatalf("roles %v err %v", roles, err)
			}
		})
	}
	if _, err := readRolePermissions(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing file was accepted")
	}
}
