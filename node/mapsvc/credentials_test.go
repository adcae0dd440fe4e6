package mapsvc

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/node/rpc"
)

// revocableAuth: api-key "k<N>" is key N until revoked; bearer "exp:<ms>"
// is principal "sub" expiring at that time.
type revocableAuth struct {
	mu      sync.Mutex
	revoked map[string]bool
	changed chan struct{}
}

func newRevocableAuth() *revocableAuth {
	return &revocableAuth{revoked: map[string]bool{}, changed: make(chan struct{})}
}

func (*revocableAuth) Methods() []string { return []string{AuthBearer, AuthAPIKey} }

func (a *revocableAuth) Authenticate(_ context.Context, method, cred string) (*Principal, error) {
	all := []string{TypeAgent, TypeClient}
	switch {
	case method == AuthAPIKey && strings.HasPrefix(cred, "k"):
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.revoked[cred] {
			return nil, rpc.NewError(rpc.CodeAuthFailed, "revoked")
		}
		return &Principal{ID: "key:" + cred, CredentialID: cred, Method: method, ParticipantIDPattern: "*", Types: all}, nil
	case method == AuthBearer && strings.HasPrefix(cred, "exp:"):
		// "exp:<ms>" or "exp:<ms>:<signing key>"
		f := strings.Split(cred, ":")
		exp, _ := strconv.ParseInt(f[1], 10, 64)
		p := &Principal{ID: "sub", Method: method, ExpiresAt: exp, ParticipantIDPattern: "*", Types: all}
		if len(f) == 3 {
			p.CredentialID = f[2]
		}
		return p, nil
	}
	return nil, rpc.NewError(rpc.CodeAuthFailed, "Invalid credentials")
}

func (a *revocableAuth) Check(p *Principal) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p.CredentialID != "" && a.revoked[p.CredentialID] {
		return rpc.NewError(rpc.CodeAuthFailed, "revoked")
	}
	return nil
}

func (a *revocableAuth) Changed() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.changed
}

func (a *revocableAuth) revoke(id string) {
	a.mu.Lock()
	a.revoked[id] = true
	close(a.changed)
	a.changed = make(chan struct{})
	a.mu.Unlock()
}

// notes records the notifications a client receives.
type notes struct {
	mu  sync.Mutex
	got []string // "method params"
}

func (n *notes) Handle(_ context.Context, _ *rpc.Conn, req *rpc.Request) (any, error) {
	n.mu.Lock()
	n.got = append(n.got, req.Method+" "+string(req.Params))
	n.mu.Unlock()
	return nil, nil
}
func (*notes) Closed(*rpc.Conn) {}

func (n *notes) find(method string) (map[string]any, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, g := range n.got {
		if m, raw, _ := strings.Cut(g, " "); m == method {
			var out map[string]any
			_ = json.Unmarshal([]byte(raw), &out)
			return out, true
		}
	}
	return nil, false
}

// wait returns the first notification of method, waiting up to 5s.
func (n *notes) wait(t *testing.T, method string) map[string]any {
	t.Helper()
	var got map[string]any
	eventually(t, 5*time.Second, func() error {
		var ok bool
		if got, ok = n.find(method); !ok {
			return fmt.Errorf("no %s yet", method)
		}
		return nil
	})
	return got
}

func (e *env) dialNotes() (*client, *notes) {
	e.t.Helper()
	n := &notes{}
	c, err := e.srv.ServeConn(context.Background(), n)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close("test done"); <-c.Done() })
	return &client{t: e.t, conn: c}, n
}

func closed(c *client) error {
	select {
	case <-c.conn.Done():
		return nil
	default:
		return fmt.Errorf("connection still open")
	}
}

func TestCredentialLifecycle(t *testing.T) {
	auth := newRevocableAuth()
	e := newEnv(t, func(c *Config) {
		c.Authenticator = auth
		c.ExpiryInterval = 10 * time.Millisecond
		c.AuthExpiryWarning = 30 * time.Second
		c.AuthRevokeGrace = 2 * time.Second
	})
	runService(t, e)
	connect := func(method, cred string) (*client, *notes) {
		c, n := e.dialNotes()
		c.must("map/connect", map[string]any{"protocolVersion": 1, "participantType": TypeClient,
			"auth": map[string]any{"method": method, "credential": cred}})
		return c, n
	}

	t.Run("revoked key: told, refused, closed after the grace", func(t *testing.T) {
		c, n := connect(AuthAPIKey, "k1")
		other, _ := connect(AuthAPIKey, "k2")
		auth.revoke("k1")
		got := n.wait(t, "map/auth/revoked")
		if got["reason"] != revokedRevoked || got["gracePeriodMs"] != float64(2000) {
			t.Fatalf("map/auth/revoked %v", got)
		}
		c.fails("map/agents/list", nil, rpc.CodeAuthFailed)
		c.fails("map/auth/refresh", `{"credential":"k1"}`, rpc.CodeAuthFailed)
		other.must("map/agents/list", nil) // another key is untouched
		e.clock.Advance(2 * time.Second)
		eventually(t, 5*time.Second, func() error { return closed(c) })
		if err := closed(other); err == nil {
			t.Fatal("a session with a valid key was closed")
		}
	})

	t.Run("expiring token: warned, refreshed, then expired and closed", func(t *testing.T) {
		exp := e.clock.Now().UnixMilli() + 3_600_000
		c, n := connect(AuthBearer, "exp:"+strconv.FormatInt(exp, 10))
		e.clock.Advance(time.Hour - 20*time.Second) // inside the warning window
		warn := n.wait(t, "map/auth/expiring")
		if warn["expiresAt"] != float64(exp) || warn["refreshBefore"].(float64) >= float64(exp) {
			t.Fatalf("map/auth/expiring %v", warn)
		}
		exp2 := exp + 60_000
		res := c.must("map/auth/refresh", map[string]any{"credential": "exp:" + strconv.FormatInt(exp2, 10)})
		if res["expiresAt"] != float64(exp2) {
			t.Fatalf("refresh %v", res)
		}
		e.clock.Advance(30 * time.Second) // past the first expiry, before the second
		c.must("map/agents/list", nil)
		e.clock.Advance(51 * time.Second) // past the refreshed expiry
		c.fails("map/agents/list", nil, rpc.CodeTokenExpired)
		if got := n.wait(t, "map/auth/revoked"); got["reason"] != revokedExpired {
			t.Fatalf("map/auth/revoked %v, want token_expired", got)
		}
		e.clock.Advance(2 * time.Second)
		eventually(t, 5*time.Second, func() error { return closed(c) })
	})

	t.Run("refresh inside the grace keeps an expired session", func(t *testing.T) {
		exp := e.clock.Now().UnixMilli() + 1000
		c, n := connect(AuthBearer, "exp:"+strconv.FormatInt(exp, 10))
		e.clock.Advance(2 * time.Second)
		n.wait(t, "map/auth/revoked")
		c.must("map/auth/refresh", map[string]any{"credential": "exp:" + strconv.FormatInt(exp+3_600_000, 10)})
		e.clock.Advance(3 * time.Second)  // past the grace
		time.Sleep(50 * time.Millisecond) // several sweeps (10ms interval) must not close it
		if err := closed(c); err == nil {
			t.Fatal("a refreshed session was closed")
		}
		c.must("map/agents/list", nil)
	})

	t.Run("withdrawn signing key: a bearer session refreshes with a token of the new key", func(t *testing.T) {
		exp := strconv.FormatInt(e.clock.Now().UnixMilli()+3_600_000, 10)
		c, n := connect(AuthBearer, "exp:"+exp+":old-key")
		auth.revoke("old-key")
		if got := n.wait(t, "map/auth/revoked"); got["reason"] != revokedRevoked {
			t.Fatalf("map/auth/revoked %v", got)
		}
		c.fails("map/agents/list", nil, rpc.CodeAuthFailed)
		c.must("map/auth/refresh", map[string]any{"credential": "exp:" + exp + ":new-key"})
		c.must("map/agents/list", nil)
		e.clock.Advance(3 * time.Second) // past the grace: not closed
		time.Sleep(50 * time.Millisecond)
		if err := closed(c); err == nil {
			t.Fatal("a refreshed bearer session was closed")
		}
	})
}
