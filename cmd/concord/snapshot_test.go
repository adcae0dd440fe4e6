package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSnapshotInspect(t *testing.T) {
	fixture := filepath.Join("..", "..", "node", "backup", "testdata", "v1.snap")
	good, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.snap")
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)/2] ^= 1
	if err := os.WriteFile(bad, corrupt, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, file string
		wantOut    []string
		wantErr    string
	}{
		{"fixture", fixture, []string{"index ", "file version    1", "format version  1", "registry", "runs", "records"}, ""},
		{"corrupt", bad, nil, "checksum mismatch"},
		{"missing", filepath.Join(t.TempDir(), "none.snap"), nil, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := execRoot(t, "snapshot", "inspect", tt.file)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(out, w) {
					t.Fatalf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
