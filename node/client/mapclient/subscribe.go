package mapclient

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/concordmap/concord/node/rpc"
)

// maxHeld bounds the events held back for a subscription id that
// map/subscribe has not returned yet.
const maxHeld = 4096

// Subscription is one map/subscribe made through the client. Its handler
// keeps receiving events across reconnects.
type Subscription struct {
	c       *Client
	params  json.RawMessage
	handler func(Event)
	id      string // guarded by c.mu
}

// ID returns the subscription's current server id (it changes when a
// reconnect lands in a new session).
func (s *Subscription) ID() string {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.id
}

// Subscribe sends map/subscribe with params (e.g. {"filter":{"eventTypes":
// [...]}}) and routes the subscription's map/event notifications to h, on
// the connection's reader goroutine (see the package doc).
func (c *Client) Subscribe(ctx context.Context, params any, h func(Event)) (*Subscription, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("map/subscribe: encode params: %w", err)
	}
	s := &Subscription{c: c, params: raw, handler: h}
	c.subMu.Lock()
	defer c.subMu.Unlock()
	conn, err := c.waitConn(ctx)
	if err != nil {
		return nil, fmt.Errorf("map/subscribe: %w", err)
	}
	if err := c.subscribeOn(ctx, conn, s); err != nil {
		return nil, err
	}
	return s, nil
}

// subscribeOn (re)subscribes s on conn and registers its new id. Events the
// reader saw for that id before the answer came back are delivered first.
// Caller holds c.subMu.
func (c *Client) subscribeOn(ctx context.Context, conn *rpc.Conn, s *Subscription) error {
	c.mu.Lock()
	c.pending++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.pending--
		if c.pending == 0 {
			c.held = nil
		}
		c.mu.Unlock()
	}()
	raw, err := c.callOn(ctx, conn, "map/subscribe", s.params)
	if err != nil {
		return err
	}
	var res struct {
		SubscriptionID string `json:"subscriptionId"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || res.SubscriptionID == "" {
		return fmt.Errorf("%w: map/subscribe result %s", ErrBadResponse, truncate(raw, 200))
	}
	c.dispatchMu.Lock()
	defer c.dispatchMu.Unlock()
	c.mu.Lock()
	if s.id != "" && c.subs[s.id] == s {
		delete(c.subs, s.id)
	}
	s.id = res.SubscriptionID
	c.subs[s.id] = s
	var early []Event
	kept := c.held[:0]
	for _, ev := range c.held {
		if ev.SubscriptionID == s.id {
			early = append(early, ev)
		} else {
			kept = append(kept, ev)
		}
	}
	c.held = kept
	c.mu.Unlock()
	for _, ev := range early {
		s.handler(ev)
	}
	return nil
}

// Unsubscribe ends the subscription on the server and stops its handler.
func (s *Subscription) Unsubscribe(ctx context.Context) error {
	c := s.c
	c.subMu.Lock()
	defer c.subMu.Unlock()
	c.mu.Lock()
	id := s.id
	delete(c.subs, id)
	c.mu.Unlock()
	_, err := c.Call(ctx, "map/unsubscribe", map[string]string{"subscriptionId": id})
	return err
}

// dispatchEvent hands one map/event to its subscription's handler.
func (c *Client) dispatchEvent(ev Event) {
	c.dispatchMu.Lock()
	defer c.dispatchMu.Unlock()
	c.mu.Lock()
	s := c.subs[ev.SubscriptionID]
	if s == nil {
		if c.pending > 0 && len(c.held) < maxHeld {
			c.held = append(c.held, ev)
		} else {
			c.log.Debug("event for unknown subscription dropped", "subscription_id", ev.SubscriptionID)
		}
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	s.handler(ev)
}

// connHandler serves what a server sends on one connection.
type connHandler struct{ c *Client }

// Handle implements rpc.Handler.
func (h *connHandler) Handle(_ context.Context, _ *rpc.Conn, req *rpc.Request) (any, error) {
	if !req.IsNotification() {
		return nil, rpc.NewError(rpc.CodeMethodNotFound, "")
	}
	switch req.Method {
	case "map/message", "map/send":
		var wrap struct {
			Message *Message `json:"message"`
		}
		var msg Message
		switch {
		case json.Unmarshal(req.Params, &wrap) == nil && wrap.Message != nil:
			msg = *wrap.Message
		case json.Unmarshal(req.Params, &msg) == nil:
		default:
			h.c.log.Warn("undecodable message dropped", "method", req.Method)
			return nil, nil
		}
		if h.c.cfg.OnMessage != nil {
			h.c.cfg.OnMessage(msg)
		}
	case "map/event":
		var p eventParams
		if err := json.Unmarshal(req.Params, &p); err != nil {
			h.c.log.Warn("undecodable event dropped", "err", err)
			return nil, nil
		}
		h.c.dispatchEvent(p.toEvent())
	case "map/subscription.overflow":
		h.c.log.Warn("subscription overflow: events were dropped by the server", "params", truncate(req.Params, 300))
	}
	return nil, nil
}

// Closed implements rpc.Handler; the supervisor watches Conn.Done instead.
func (h *connHandler) Closed(*rpc.Conn) {}
