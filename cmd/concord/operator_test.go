package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/node/client/admin"
	"github.com/concordmap/concord/node/registry"
)

// The operator commands against a dev node: health lists the lone leader
// (failure tolerance 0), and a drain is refused because there is nowhere
// to move the sessions; the voter flags are checked before anything runs.
func TestOperatorCommands(t *testing.T) {
	srv := startDevNode(t)
	addr := srv.GRPCAddr()
	// The leader's first autopilot pass follows its election closely.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := execRoot(t, "operator", "health", "--addr", addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling the first report
	}
	tests := []struct {
		name    string
		args    []string
		wantOut string
		wantErr string
	}{
		{"health", []string{"operator", "health", "--addr", addr}, "failure tolerance 0", ""},
		{"health lists the leader", []string{"operator", "health", "--addr", addr}, "dev-1  leader", ""},
		{"health shows versions", []string{"operator", "health", "--addr", addr}, "VERSION", ""},
		{"health as JSON", []string{"operator", "health", "--addr", addr, "--json"}, `"role": "leader"`, ""},
		{"drain the only server", []string{"operator", "drain", "dev-1", "--addr", addr}, "", "only alive server"},
		{"drain an unknown node", []string{"operator", "drain", "nope", "--addr", addr}, "", "no node \"nope\" in this system"},
		{"drain needs a node", []string{"operator", "drain", "--addr", addr}, "", "accepts 1 arg"},
		{"raft voters 4", []string{"server", "--node-id", "n1", "--data-dir", t.TempDir(), "--raft-voters", "4"}, "", "--raft-voters 4: use 3 or 5"},
		{"no stabilization", []string{"server", "--node-id", "n1", "--data-dir", t.TempDir(), "--server-stabilization-time", "0s"}, "", "must be positive"},
		{"min quorum zero", []string{"server", "--node-id", "n1", "--data-dir", t.TempDir(), "--min-quorum", "0"}, "", "--min-quorum 0: use 1 up to --raft-voters (5)"},
		{"min quorum negative", []string{"server", "--node-id", "n1", "--data-dir", t.TempDir(), "--min-quorum", "-1"}, "", "--min-quorum -1: use 1 up to"},
		{"dead server cleanup zero", []string{"server", "--node-id", "n1", "--data-dir", t.TempDir(), "--dead-server-cleanup", "0s"}, "", "--dead-server-cleanup 0s: must be positive"},
		{"drain timeout negative", []string{"server", "--node-id", "n1", "--data-dir", t.TempDir(), "--drain-timeout", "-5s"}, "", "--drain-timeout -5s: must be positive"},
		{"drain promotion timeout zero", []string{"server", "--node-id", "n1", "--data-dir", t.TempDir(), "--drain-promotion-timeout", "0s"}, "", "--drain-promotion-timeout 0s: must be positive"},
		{"drain promotion timeout negative", []string{"operator", "drain", "dev-1", "--addr", addr, "--promotion-timeout", "-1s"}, "", "promotion_timeout_ms must not be negative"},
		{"raft voters 2", []string{"server", "--node-id", "n1", "--data-dir", t.TempDir(), "--raft-voters", "2"}, "", "--raft-voters 2: use 3 or 5"},
		{"raft voters not a number", []string{"server", "--node-id", "n1", "--data-dir", t.TempDir(), "--raft-voters", "three"}, "", `invalid argument "three" for "--raft-voters"`},
		{"min quorum above voters", []string{"server", "--node-id", "n1", "--data-dir", t.TempDir(), "--raft-voters", "3", "--min-quorum", "5"}, "", "--min-quorum 5 exceeds --raft-voters 3"},
	}
	t.Run("health JSON decodes", func(t *testing.T) {
		out, stderr, err := execRootStdout(t, "operator", "health", "--addr", addr, "--json") // stdout alone is the JSON
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		var h healthJSON
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&h); err != nil {
			t.Fatalf("decode %q: %v", out, err)
		}
		if h.Leader != "dev-1" || !h.Healthy || len(h.Servers) != 1 || h.Servers[0].LastContactMs == nil || h.Servers[0].Role != "leader" {
			t.Fatalf("report %+v", h)
		}
	})
	// The lone server advertises this build's FSM level, so its leader
	// records it (a pass or two after the election).
	t.Run("health shows the FSM levels", func(t *testing.T) {
		want := fmt.Sprintf("system FSM level %d", registry.FSMLevel)
		deadline := time.Now().Add(10 * time.Second)
		for {
			out, err := execRoot(t, "operator", "health", "--addr", addr)
			if err == nil && strings.Contains(out, want) && strings.Contains(out, "FSM LEVEL") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("out %q err %v, want %q", out, err, want)
			}
			time.Sleep(50 * time.Millisecond) // polling the leader's next pass
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
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

// An admin command without --ca-file toward a TLS port says why it failed
// and what to pass; a refused connection gets no such hint.
func TestAdminCall_PlaintextToTLSHint(t *testing.T) {
	t.Setenv("CONCORD_CA_FILE", "")
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "https://")
	_, err := execRoot(t, "operator", "health", "--addr", addr)
	if err == nil || !strings.Contains(err.Error(), "pass --ca-file or set CONCORD_CA_FILE") {
		t.Fatalf("plaintext to TLS: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()
	_, err = execRoot(t, "operator", "health", "--addr", closed)
	if err == nil || strings.Contains(err.Error(), "--ca-file") {
		t.Fatalf("refused connection: %v", err)
	}
}

func TestDrainWarning(t *testing.T) {
	voter := func(id string) admin.ServerHealth { return admin.ServerHealth{ID: id, Voter: true, Healthy: true} }
	spare := func(id string, healthy, draining bool) admin.ServerHealth {
		return admin.ServerHealth{ID: id, Healthy: healthy, Draining: draining}
	}
	three := []admin.ServerHealth{voter("n1"), voter("n2"), voter("n3")}
	tests := []struct {
		name    string
		servers []admin.ServerHealth
		drain   string
		warn    bool
	}{
		{"voter at the minimum, no spare", three, "n1", true},
		{"voter with a healthy spare", append(three[:3:3], spare("n4", true, false)), "n1", false},
		{"voter whose only spare is unhealthy", append(three[:3:3], spare("n4", false, false)), "n1", true},
		{"voter whose only spare is draining", append(three[:3:3], spare("n4", true, true)), "n1", true},
		{"voter above the minimum", append(three[:3:3], voter("n4")), "n1", false},
		{"a non-voter", append(three[:3:3], spare("n4", true, false)), "n4", false},
		{"unknown node (the server answers)", three, "nope", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := drainWarning(admin.Health{MinQuorum: 3, Servers: tt.servers}, tt.drain)
			if (w != "") != tt.warn || (tt.warn && !strings.Contains(w, tt.drain+" votes and no healthy non-voter")) {
				t.Fatalf("warning %q, want one: %v", w, tt.warn)
			}
		})
	}
}
