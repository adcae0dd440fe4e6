package cluster

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concordmap/concord/node/membership"
)

func TestDrainTarget(t *testing.T) {
	members := []membership.Member{
		{ID: "n1", Status: membership.StatusAlive},
		{ID: "n2", Status: membership.StatusLeft},
		{ID: "n3", Status: membership.StatusDead},
	}
	tests := []struct {
		id   string
		code codes.Code
		msg  string
	}{
		{"n1", codes.OK, ""},
		{"n2", codes.FailedPrecondition, "node n2 is left: nothing to drain"},
		{"n3", codes.FailedPrecondition, "node n3 is dead: nothing to drain"},
		{"nope", codes.NotFound, `no node "nope" in this system`},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			err := drainTarget(members, tt.id)
			st, _ := status.FromError(err)
			if st.Code() != tt.code || (tt.msg != "" && !strings.Contains(st.Message(), tt.msg)) {
				t.Fatalf("drainTarget(%s) = %v, want %v %q", tt.id, err, tt.code, tt.msg)
			}
		})
	}
}
