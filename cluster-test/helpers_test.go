package clustertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

// connector is a cluster a test can connect participants to: the
// in-process Cluster or a ProcCluster of real processes.
type connector interface {
	Connect(t testing.TB, i int, params map[string]any) *Client
}

// agentOn connects a participant to node i and registers one agent owned
// by it; the connection's session speaks for that agent in map/send.
// Orphan policy: a dropped connection leaves the agent registered.
func agentOn(t testing.TB, c connector, i int, agentID string, fields map[string]any) *Client {
	t.Helper()
	cl := c.Connect(t, i, map[string]any{
		"participantType": "agent", "participantId": agentID, "name": agentID,
		"disconnectPolicy": map[string]any{"agentBehavior": "orphan"},
	})
	registerRetry(t, cl, agentID, fields)
	return cl
}

// registerRetry registers an agent as set-up, retrying retryable errors
// (an election in progress); AGENT_EXISTS after an attempt with unknown
// outcome means that attempt took effect. Every attempt is in the ledger.
func registerRetry(t testing.TB, cl *Client, agentID string, fields map[string]any) {
	t.Helper()
	uncertain := false
	err := Poll(context.Background(), CallTimeout, func() error {
		err := cl.Register(agentID, fields)
		switch {
		case err == nil:
			return nil
		case uncertain && rpc.IsCode(err, rpc.CodeAgentExists):
			return nil
		case IsRetryable(err):
			uncertain = true
			return err
		}
		return Permanent(err)
	})
	if err != nil {
		t.Fatalf("register %s: %s", agentID, Describe(err))
	}
}

// requireMAPError checks err is a MAP error with the code and retryable
// flag, and returns it.
func requireMAPError(t testing.TB, err error, code int, retryable bool) *rpc.Error {
	t.Helper()
	var re *rpc.Error
	if !errors.As(err, &re) {
		t.Fatalf("want MAP error %d, got %v", code, err)
	}
	if re.Code != code {
		t.Fatalf("want MAP error %d, got %s", code, Describe(err))
	}
	if re.Data == nil || re.Data.Retryable != retryable {
		t.Fatalf("MAP error %d: want data.retryable=%v, got %s", code, retryable, Describe(err))
	}
	return re
}

// others returns the nodes of list other than the excluded ones.
func others(list []*Node, exclude ...*Node) []*Node {
	var out []*Node
	for _, n := range list {
		if !slices.Contains(exclude, n) {
			out = append(out, n)
		}
	}
	return out
}

// sameSet reports whether got and want hold the same strings.
func sameSet(got, want []string) error {
	g, w := slices.Clone(got), slices.Clone(want)
	slices.Sort(g)
	slices.Sort(w)
	if !slices.Equal(g, w) {
		return fmt.Errorf("got %v, want %v", g, w)
	}
	return nil
}

// sessionOfAgent returns the session that owns an agent, per r.
func sessionOfAgent(r registry.Reader, agentID string) (registry.Session, bool) {
	a, ok := r.Agent(agentID)
	if !ok || a.SessionID == "" {
		return registry.Session{}, false
	}
	return r.Session(a.SessionID)
}

// subscribeRetry subscribes as set-up, retrying retryable errors (a retry
// after an unknown outcome may leave an extra subscription, whose events
// are filed under its own id and ignored).
func subscribeRetry(t testing.TB, cl *Client, params map[string]any) string {
	t.Helper()
	var id string
	err := Poll(context.Background(), CallTimeout, func() error {
		var err error
		id, err = cl.Subscribe(params)
		if err != nil && !IsRetryable(err) {
			return Permanent(err)
		}
		return err
	})
	if err != nil {
		t.Fatalf("subscribe on %s: %s", cl.url, Describe(err))
	}
	return id
}

// writeRetry calls a method as set-up, retrying retryable errors.
func writeRetry(t testing.TB, cl *Client, method string, params any) {
	t.Helper()
	err := Poll(context.Background(), CallTimeout, func() error {
		_, err := cl.Call(method, params)
		if err != nil && !IsRetryable(err) {
			return Permanent(err)
		}
		return err
	})
	if err != nil {
		t.Fatalf("%s on %s: %s", method, cl.url, Describe(err))
	}
}
