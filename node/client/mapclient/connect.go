package mapclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/concordmap/concord/node/internal/backoff"
	"github.com/concordmap/concord/node/rpc"
)

// connectParams is map/connect's params.
type connectParams struct {
	ProtocolVersion  int               `json:"protocolVersion"`
	ParticipantType  string            `json:"participantType"`
	ParticipantID    string            `json:"participantId,omitempty"`
	Name             string            `json:"name,omitempty"`
	SessionID        string            `json:"sessionId,omitempty"`
	ResumeToken      string            `json:"resumeToken,omitempty"`
	DisconnectPolicy *DisconnectPolicy `json:"disconnectPolicy,omitempty"`
	Auth             *Auth             `json:"auth,omitempty"`
}

// connectAny tries every URL, starting at index start, pass after pass with
// backoff in between, until one accepts map/connect or ctx ends.
func (c *Client) connectAny(ctx context.Context, start int) (*rpc.Conn, connectResult, int, error) {
	n := len(c.cfg.URLs)
	var last error
	for pass := 0; ; pass++ {
		for i := range n {
			idx := (start + i) % n
			conn, res, err := c.connectOne(ctx, c.cfg.URLs[idx])
			if err == nil {
				return conn, res, idx, nil
			}
			last = err
			c.log.Debug("connect attempt failed", "peer", c.cfg.URLs[idx], "err", err)
			if ctx.Err() != nil {
				return nil, connectResult{}, 0, fmt.Errorf("%w: %w", ErrUnreachable, last)
			}
		}
		t := time.NewTimer(backoff.Delay(pass, c.cfg.MinBackoff, c.cfg.MaxBackoff, nil))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, connectResult{}, 0, fmt.Errorf("%w: %w", ErrUnreachable, last)
		case <-t.C:
		}
	}
}

// connectOne dials url and sends map/connect, resuming the current session
// when there is one. A server that refuses the resume token (1001: the
// session belongs elsewhere or the token is stale) gets a fresh connect.
func (c *Client) connectOne(ctx context.Context, url string) (*rpc.Conn, connectResult, error) {
	actx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
	defer cancel()
	conn, err := rpc.Dial(actx, url, c.cfg.RPC, &connHandler{c: c})
	if err != nil {
		return nil, connectResult{}, err
	}
	c.mu.Lock()
	p := connectParams{ProtocolVersion: 1, ParticipantType: c.cfg.ParticipantType, ParticipantID: c.cfg.ParticipantID,
		Name: c.cfg.Name, DisconnectPolicy: c.cfg.DisconnectPolicy, Auth: c.cfg.Auth,
		SessionID: c.info.SessionID, ResumeToken: c.info.ResumeToken}
	c.mu.Unlock()
	raw, err := conn.Call(actx, "map/connect", p)
	if rpc.IsCode(err, rpc.CodeAuthFailed) && p.ResumeToken != "" {
		c.log.Warn("resume refused, opening a new session", "peer", url, "err", err)
		p.SessionID, p.ResumeToken = "", ""
		raw, err = conn.Call(actx, "map/connect", p)
	}
	var res connectResult
	if err == nil {
		if uerr := json.Unmarshal(raw, &res); uerr != nil || res.SessionID == "" {
			err = fmt.Errorf("%w: map/connect result %s", ErrBadResponse, truncate(raw, 200))
		}
	}
	if err != nil {
		_ = conn.Close("connect failed")
		<-conn.Done()
		return nil, connectResult{}, fmt.Errorf("connect %s: %w", url, err)
	}
	return conn, res, nil
}

// supervise reconnects whenever the current connection ends, until ctx is
// cancelled (Close) or a reconnect fails for ReconnectTimeout.
func (c *Client) supervise(ctx context.Context) {
	defer close(c.done)
	for {
		c.mu.Lock()
		conn := c.conn
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-conn.Done():
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return
		}
		c.conn, c.ready = nil, make(chan struct{})
		lostURL, start := c.info.URL, c.urlIdx+1
		c.info.URL = ""
		c.mu.Unlock()
		c.log.Warn("connection lost, reconnecting", "peer", lostURL)
		if !c.reconnect(ctx, start, lostURL) {
			return
		}
	}
}

// reconnect finds a server, restores the session's agents and subscriptions
// and installs the connection. It returns false when the client must stop.
func (c *Client) reconnect(ctx context.Context, start int, lostURL string) bool {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.ReconnectTimeout)
	defer cancel()
	conn, res, idx, err := c.connectAny(rctx, start)
	if err != nil {
		c.mu.Lock()
		if !c.closed {
			c.err = err
			c.log.Error("giving up reconnecting", "err", err)
		}
		c.mu.Unlock()
		return false
	}
	if err := c.restore(rctx, conn, res); err != nil {
		// The new connection probably dropped too; the loop notices.
		c.log.Warn("restore after reconnect failed", "peer", c.cfg.URLs[idx], "err", err)
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		_ = conn.Close("client closed")
		<-conn.Done()
		return false
	}
	c.install(conn, res, idx)
	c.log.Info("reconnected", "peer", c.cfg.URLs[idx], "resumed", res.Reconnected)
	if c.cfg.OnReconnect != nil {
		c.cfg.OnReconnect(ReconnectInfo{URL: c.cfg.URLs[idx], Resumed: res.Reconnected, SessionID: res.SessionID,
			Lost: fmt.Errorf("connection to %s lost", lostURL)})
	}
	return true
}

// restore brings a reconnected session back to what the application set
// up: agents the session no longer owns are registered again, and in a new
// session every subscription is made again (a resumed session keeps its
// subscriptions on the server, under the same ids).
func (c *Client) restore(ctx context.Context, conn *rpc.Conn, res connectResult) error {
	c.mu.Lock()
	agents := slices.Clone(c.agents)
	c.mu.Unlock()
	var errs []error
	for _, a := range agents {
		if res.Reconnected && slices.Contains(res.OwnedAgents, a.AgentID) {
			continue
		}
		if _, err := c.callOn(ctx, conn, "map/agents/register", a); err != nil && !rpc.IsCode(err, rpc.CodeAgentExists) {
			errs = append(errs, fmt.Errorf("register agent %s: %w", a.AgentID, err))
		}
	}
	if !res.Reconnected {
		c.subMu.Lock()
		defer c.subMu.Unlock()
		c.mu.Lock()
		subs := make([]*Subscription, 0, len(c.subs))
		for _, s := range c.subs {
			subs = append(subs, s)
		}
		c.mu.Unlock()
		for _, s := range subs {
			if err := c.subscribeOn(ctx, conn, s); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}
