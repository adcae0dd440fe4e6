package clustertest

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/node/mapsvc"
	"github.com/concordmap/concord/node/rpc"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
)

// Client is a minimal MAP participant for scenarios: one WebSocket
// connection made with node/rpc.Dial, no reconnects (a test must see every
// failure), and a collector of the map/message and map/event notifications
// it receives. Calls may be made from any goroutine; the Must* helpers
// call t.Fatal and belong on the test goroutine.
type Client struct {
	t      testing.TB
	url    string
	conn   *rpc.Conn
	ledger *Ledger
	in     *inbox

	mu      sync.Mutex
	session ConnectResult
	token   string // bearer token Connect adds when params carry no auth
}

// SetToken makes Connect authenticate with this bearer token when its
// params carry no auth (Cluster.Connect sets the cluster's).
func (c *Client) SetToken(token string) {
	c.mu.Lock()
	c.token = token
	c.mu.Unlock()
}

// ConnectResult is the part of map/connect's result scenarios use.
type ConnectResult struct {
	SessionID     string `json:"sessionId"`
	ParticipantID string `json:"participantId"`
	ResumeToken   string `json:"resumeToken"`
	Reconnected   bool   `json:"reconnected"`
}

// Message is a received map/message.
type Message struct {
	ID      string          `json:"id"`
	From    string          `json:"from"`
	To      json.RawMessage `json:"to"`
	Payload json.RawMessage `json:"payload"`
	Meta    json.RawMessage `json:"meta"`
}

// EventNote is a received map/event notification.
type EventNote struct {
	SubscriptionID string `json:"subscriptionId"`
	SequenceNumber uint64 `json:"sequenceNumber"`
	EventID        string `json:"eventId"`
	Event          struct {
		ID     string          `json:"id"`
		Type   string          `json:"type"`
		Source string          `json:"source"`
		Data   json.RawMessage `json:"data"`
	} `json:"event"`
}

// SendResult is map/send's result.
type SendResult struct {
	MessageID string   `json:"messageId"`
	Delivered []string `json:"delivered"`
	Queued    []string `json:"queued"`
	Failed    []struct {
		ID     string `json:"id"`
		Reason string `json:"reason"`
	} `json:"failed"`
}

// Dial opens a MAP connection to url (no map/connect yet). Writes made
// through the client are recorded in ledger when it is not nil. The
// connection is closed at t's cleanup.
func Dial(t testing.TB, url string, ledger *Ledger) (*Client, error) {
	return dialTLS(t, url, ledger, ClientTLS())
}

// dialTLS is Dial trusting tlsCfg's CA (a system other than SystemID).
func dialTLS(t testing.TB, url string, ledger *Ledger, tlsCfg *tls.Config) (*Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	in := newInbox()
	cc := rpc.DefaultClientConfig()
	cc.TLSConfig = tlsCfg
	conn, err := rpc.Dial(ctx, url, cc, &clientHandler{in: in})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", url, err)
	}
	c := &Client{t: t, url: url, conn: conn, ledger: ledger, in: in}
	t.Cleanup(c.Close)
	return c, nil
}

// Connect dials node i and calls map/connect with params (protocolVersion
// 1 and participantType "agent" unless given); it fails t on error. A
// retryable error (an election in progress) is retried for CallTimeout:
// connecting is set-up, not the property under test, and an extra session
// left by a retry after an unknown outcome is harmless.
func (c *Cluster) Connect(t testing.TB, i int, params map[string]any) *Client {
	t.Helper()
	cl, err := dialTLS(t, c.Node(i).MAPURL(), c.Ledger, tlstest.ClientTLS(c.SystemID(), ""))
	if err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	cl.SetToken(c.Token())
	err = Poll(context.Background(), CallTimeout, func() error {
		_, err := cl.Connect(params)
		if err != nil && !IsRetryable(err) {
			return Permanent(err)
		}
		return err
	})
	if err != nil {
		t.Fatalf("clustertest: map/connect on %s: %s", c.Node(i), Describe(err))
	}
	return cl
}

// Connect calls map/connect.
func (c *Client) Connect(params map[string]any) (ConnectResult, error) {
	p := map[string]any{"protocolVersion": 1, "participantType": "agent"}
	for k, v := range params {
		p[k] = v
	}
	c.mu.Lock()
	p = withAuth(p, c.token)
	c.mu.Unlock()
	var res ConnectResult
	if err := c.CallInto("map/connect", p, &res); err != nil {
		return res, err
	}
	c.mu.Lock()
	c.session = res
	c.mu.Unlock()
	return res, nil
}

// Session returns the last map/connect result.
func (c *Client) Session() ConnectResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session
}

// Call sends one request, bounded by CallTimeout.
func (c *Client) Call(method string, params any) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	return c.conn.Call(ctx, method, params)
}

// CallInto calls method and decodes the result into out.
func (c *Client) CallInto(method string, params, out any) error {
	raw, err := c.Call(method, params)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s: decode %s: %w", method, raw, err)
	}
	return nil
}

// MustCall calls method and fails the test on error.
func (c *Client) MustCall(method string, params any) map[string]any {
	c.t.Helper()
	var out map[string]any
	if err := c.CallInto(method, params, &out); err != nil {
		c.t.Fatalf("clustertest: %s on %s: %s", method, c.url, Describe(err))
	}
	return out
}

// Register registers an agent (map/agents/register with agentId plus
// fields) and records the outcome in the ledger.
func (c *Client) Register(agentID string, fields map[string]any) error {
	p := map[string]any{"agentId": agentID}
	for k, v := range fields {
		p[k] = v
	}
	_, err := c.Call("map/agents/register", p)
	c.record(OpRegister, agentID, err)
	return err
}

// Unregister unregisters an agent and records the outcome in the ledger.
func (c *Client) Unregister(agentID string) error {
	_, err := c.Call("map/agents/unregister", map[string]any{"agentId": agentID})
	c.record(OpUnregister, agentID, err)
	return err
}

func (c *Client) record(kind OpKind, agentID string, err error) {
	if c.ledger != nil {
		c.ledger.Record(kind, agentID, OutcomeOf(err))
	}
}

// OutcomeOf classifies a write's error: nil is Acked; a MAP error other
// than 4000 (unavailable, possibly after proposing) and -32603 is Refused
// (the state did not change); anything else is Unknown.
func OutcomeOf(err error) Outcome {
	if err == nil {
		return Acked
	}
	var re *rpc.Error
	if errors.As(err, &re) && re.Code != rpc.CodeExhausted && re.Code != rpc.CodeInternal {
		return Refused
	}
	return Unknown
}

// Send calls map/send with params ({to, payload?, meta?, ...}).
func (c *Client) Send(params map[string]any) (SendResult, error) {
	var res SendResult
	err := c.CallInto("map/send", params, &res)
	return res, err
}

// Subscribe calls map/subscribe with params (e.g. {"filter": {...}}) and
// returns the subscription id; its events collect in the inbox.
func (c *Client) Subscribe(params map[string]any) (string, error) {
	var res struct {
		SubscriptionID string `json:"subscriptionId"`
	}
	if err := c.CallInto("map/subscribe", params, &res); err != nil {
		return "", err
	}
	return res.SubscriptionID, nil
}

// Messages returns the messages received so far, in arrival order.
func (c *Client) Messages() []Message { return c.in.snapshotMessages() }

// Events returns the events received so far for a subscription ("" for
// all), in arrival order.
func (c *Client) Events(subID string) []EventNote { return c.in.snapshotEvents(subID) }

// WaitMessages waits until at least n messages have arrived.
func (c *Client) WaitMessages(n int, timeout time.Duration) ([]Message, error) {
	var got []Message
	err := c.in.wait(timeout, func() error {
		got = c.in.snapshotMessages()
		if len(got) < n {
			return fmt.Errorf("%d of %d messages arrived", len(got), n)
		}
		return nil
	})
	return got, err
}

// WaitEvents waits until check accepts the events received for subID.
func (c *Client) WaitEvents(subID string, timeout time.Duration, check func([]EventNote) error) ([]EventNote, error) {
	var got []EventNote
	err := c.in.wait(timeout, func() error {
		got = c.in.snapshotEvents(subID)
		return check(got)
	})
	return got, err
}

// Done is closed when the connection has ended.
func (c *Client) Done() <-chan struct{} { return c.conn.Done() }

// ReconnectHint is a draining node's x-concord/reconnect notification.
type ReconnectHint struct {
	Reason string          `json:"reason"`
	NodeID string          `json:"nodeId"`
	Nodes  []ReconnectNode `json:"nodes"`
}

// ReconnectNode is a node a reconnect hint offers.
type ReconnectNode struct {
	NodeID string `json:"nodeId"`
	URL    string `json:"url"`
}

// Hint returns the reconnect hint the server sent, if any.
func (c *Client) Hint() (ReconnectHint, bool) {
	c.in.mu.Lock()
	defer c.in.mu.Unlock()
	if c.in.hint == nil {
		return ReconnectHint{}, false
	}
	return *c.in.hint, true
}

// Close closes the connection (no map/disconnect: like a dropped socket)
// and waits for its goroutines. It is idempotent.
func (c *Client) Close() {
	_ = c.conn.Close("client closed")
	<-c.conn.Done()
}

// clientHandler files the server's notifications into the inbox and
// refuses server-to-client requests.
type clientHandler struct{ in *inbox }

func (h *clientHandler) Handle(_ context.Context, _ *rpc.Conn, req *rpc.Request) (any, error) {
	if !req.IsNotification() {
		return nil, rpc.NewError(rpc.CodeMethodNotFound, "")
	}
	switch req.Method {
	case "map/message":
		var p struct {
			Message Message `json:"message"`
		}
		if err := json.Unmarshal(req.Params, &p); err == nil {
			h.in.addMessage(p.Message)
		}
	case "map/event":
		var ev EventNote
		if err := json.Unmarshal(req.Params, &ev); err == nil {
			h.in.addEvent(ev)
		}
	case mapsvc.ReconnectNotification:
		var hint ReconnectHint
		if err := json.Unmarshal(req.Params, &hint); err == nil {
			h.in.setHint(hint)
		}
	}
	return nil, nil
}

func (h *clientHandler) Closed(*rpc.Conn) {}

// inbox collects notifications; changed is closed and replaced on every
// addition so waiters wake without polling.
type inbox struct {
	mu       sync.Mutex
	messages []Message
	events   []EventNote
	hint     *ReconnectHint
	changed  chan struct{}
}

func (in *inbox) setHint(h ReconnectHint) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.hint = &h
	close(in.changed)
	in.changed = make(chan struct{})
}

func newInbox() *inbox { return &inbox{changed: make(chan struct{})} }

func (in *inbox) addMessage(m Message) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.messages = append(in.messages, m)
	close(in.changed)
	in.changed = make(chan struct{})
}

func (in *inbox) addEvent(e EventNote) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.events = append(in.events, e)
	close(in.changed)
	in.changed = make(chan struct{})
}

func (in *inbox) snapshotMessages() []Message {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Message(nil), in.messages...)
}

func (in *inbox) snapshotEvents(subID string) []EventNote {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []EventNote
	for _, e := range in.events {
		if subID == "" || e.SubscriptionID == subID {
			out = append(out, e)
		}
	}
	return out
}

// wait re-checks check on every arrival until it passes or timeout.
func (in *inbox) wait(timeout time.Duration, check func() error) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		in.mu.Lock()
		changed := in.changed
		in.mu.Unlock()
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return err
		}
	}
}

// Describe renders an error with a MAP error's data (category, retryable,
// details), which rpc.Error's message leaves out.
func Describe(err error) string {
	var re *rpc.Error
	if errors.As(err, &re) && re.Data != nil {
		b, _ := json.Marshal(re.Data)
		return fmt.Sprintf("%v %s", err, b)
	}
	return fmt.Sprint(err)
}

// IsRetryable reports whether err is a MAP error marked retryable.
func IsRetryable(err error) bool {
	var re *rpc.Error
	return errors.As(err, &re) && re.Data != nil && re.Data.Retryable
}
