package main

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

func TestHealthAndSnapshotCLI(t *testing.T) {
	srv := startDevNode(t)
	notReady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"ready":false,"reason":"no raft leader"}`, http.StatusServiceUnavailable)
	}))
	t.Cleanup(notReady.Close)
	url := "http://" + srv.HTTPAddr()
	tests := []struct {
		name    string
		args    []string
		wantOut string
		wantErr string
	}{
		{"live", []string{"health", "--url", url}, `"status":"ok"`, ""},
		{"ready", []string{"health", "--url", url + "/", "--ready"}, `"ready":true`, ""},
		{"not ready", []string{"health", "--url", notReady.URL, "--ready"}, "", "503 Service Unavailable"},
		{"nothing listening", []string{"health", "--url", "http://127.0.0.1:1"}, "", "probe"},
		{"bad ca file", []string{"health", "--url", url, "--ca-file", filepath.Join(t.TempDir(), "none.pem")}, "", "--ca-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := execRoot(t, tt.args...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !strings.Contains(out, tt.wantOut) {
				t.Fatalf("out %q err %v, want %q", out, err, tt.wantOut)
			}
		})
	}

	// snapshot save, inspect and restore through the CLI against the node.
	file := filepath.Join(t.TempDir(), "dev.snap")
	out, err := execRoot(t, "snapshot", "save", "--addr", srv.GRPCAddr(), file)
	if err != nil || !strings.Contains(out, "saved snapshot at index") {
		t.Fatalf("save: %q %v", out, err)
	}
	if out, err = execRoot(t, "snapshot", "inspect", file); err != nil || !strings.Contains(out, "registry") {
		t.Fatalf("inspect: %q %v", out, err)
	}
	if out, err = execRoot(t, "snapshot", "restore", "--addr", srv.GRPCAddr(), file); err != nil || !strings.Contains(out, "restored snapshot of index") {
		t.Fatalf("restore: %q %v", out, err)
	}
}
