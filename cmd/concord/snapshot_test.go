package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSnapshotInspect: concord snapshot inspect prints a file's header and
// refuses a corrupt, missing or future-version file with a clear message;
// restore refuses the same files before sending anything.
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
	// A file a newer concord wrote: the file format version (after the
	// 8-byte magic) from the future.
	future := filepath.Join(t.TempDir(), "future.snap")
	newer := bytes.Clone(good)
	binary.BigEndian.PutUint16(newer[8:], 99)
	if err := os.WriteFile(future, newer, 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, file string
		verb       []string
		wantOut    []string
		wantErr    string
	}{
		{"fixture", fixture, nil, []string{"index ", "file version    1", "format version  1", "registry", "runs", "records", "agent 3", "run 1"}, ""},
		{"fixture as JSON", fixture, []string{"inspect", "--json"}, []string{`"fileVersion": 1`, `"formatVersion": 1`, `"name": "registry"`, `"records": `, `"agent": 3`}, ""},
		{"corrupt", bad, nil, nil, "checksum mismatch"},
		{"missing", filepath.Join(t.TempDir(), "none.snap"), nil, nil, "no such file"},
		{"empty", write("empty.snap", nil), nil, nil, "corrupt snapshot file: empty file"},
		{"magic only", write("short.snap", good[:9]), nil, nil, "corrupt snapshot file: truncated (9 bytes)"},
		{"truncated", write("half.snap", good[:len(good)/2]), nil, nil, "corrupt snapshot file: truncated"},
		{"not a snapshot", write("notes.txt", []byte("hello world, no snapshot here")), nil, nil, "not a concord snapshot file (bad magic)"},
		{"a directory", t.TempDir(), nil, nil, "not a regular file (d"},
		{"future version", future, nil, nil, "version 99 is not supported: this binary reads versions 1 to 1"},
		// restore checks the file before it sends anything (no node here).
		{"restore future version", future, []string{"restore", "--addr", "127.0.0.1:1"}, nil, "version 99 is not supported"},
		{"restore corrupt", bad, []string{"restore", "--addr", "127.0.0.1:1"}, nil, "checksum mismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"snapshot", "inspect", tt.file}
			if tt.verb != nil {
				args = append([]string{"snapshot", tt.verb[0], tt.file}, tt.verb[1:]...)
			}
			out, err := execRoot(t, args...)
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
