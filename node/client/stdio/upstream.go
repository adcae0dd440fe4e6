package stdio

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/concordmap/concord/federation/connclose"
	"github.com/concordmap/concord/node/internal/backoff"
	"github.com/concordmap/concord/node/rpc"
	"github.com/gorilla/websocket"
)

// upstream is one WebSocket connection of a Bridge to a node.
type upstream struct {
	b   *Bridge
	ws  *websocket.Conn
	url string
}

// connect tries the URLs from start on, in passes separated by a growing,
// jittered backoff, until one accepts or timeout (0: none) passes. It
// returns the connection and the index of its URL.
func (b *Bridge) connect(ctx context.Context, start int, timeout time.Duration) (*upstream, int, error) {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	var lastErr error
	for pass := 0; ; pass++ {
		for k := range b.cfg.URLs {
			i := (start + k) % len(b.cfg.URLs)
			up, err := b.dial(ctx, b.cfg.URLs[i], deadline)
			if err == nil {
				b.log.Info("connected to node", "peer", up.url)
				return up, i, nil
			}
			lastErr = err
			b.log.Debug("dial failed", "peer", b.cfg.URLs[i], "err", err)
			if ctx.Err() != nil {
				return nil, 0, ctx.Err()
			}
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return nil, 0, fmt.Errorf("rpc: no MAP server reachable within %v: %w", timeout, lastErr)
		}
		t := time.NewTimer(backoff.Delay(pass, b.cfg.MinBackoff, b.cfg.MaxBackoff, nil))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, 0, ctx.Err()
		case <-t.C:
		}
	}
}

func (b *Bridge) dial(ctx context.Context, url string, deadline time.Time) (*upstream, error) {
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	d := websocket.Dialer{HandshakeTimeout: b.cfg.HandshakeTimeout, TLSClientConfig: b.cfg.TLSConfig}
	ws, resp, err := d.DialContext(ctx, url, b.cfg.Header)
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(b.cfg.MaxServerFrameBytes)
	return &upstream{b: b, ws: ws, url: url}, nil
}

// resume runs after a reconnect: it replays the subprocess's map/connect
// with its session's credentials (Config.Resume) and tells the subprocess
// the outcome. An error means this connection failed too.
func (b *Bridge) resume(ctx context.Context, up *upstream) error {
	stop := context.AfterFunc(ctx, func() { _ = up.close() }) // unblocks the replay
	defer stop()
	notice := map[string]any{"server": up.url, "resumed": false, "reconnected": false}
	if sess := b.trk.current(); b.cfg.Resume && sess != nil {
		res, err := up.replayConnect(sess)
		if err != nil {
			return err
		}
		notice["resumed"] = true
		if res.Error != nil {
			b.trk.setSession(nil) // refused: the subprocess must connect anew
			notice["error"] = res.Error
		} else {
			var r struct {
				SessionID, ResumeToken string
				Reconnected            bool
			}
			_ = json.Unmarshal(res.Result, &r)
			notice["reconnected"], notice["sessionId"] = r.Reconnected, r.SessionID
			if r.ResumeToken == "" {
				r.ResumeToken = sess.resumeToken
			}
			b.trk.setSession(&bridgeSession{params: sess.params, sessionID: r.SessionID, resumeToken: r.ResumeToken})
		}
	}
	b.out.notify(ReconnectedMethod, notice)
	return nil
}

// replayConnect sends map/connect with the remembered params plus sessionId
// and resumeToken and waits for its answer; frames that arrive first go to
// the subprocess as usual.
func (up *upstream) replayConnect(sess *bridgeSession) (*replayResult, error) {
	params := map[string]json.RawMessage{}
	if len(sess.params) > 0 {
		_ = json.Unmarshal(sess.params, &params)
	}
	params["sessionId"], _ = json.Marshal(sess.sessionID)
	params["resumeToken"], _ = json.Marshal(sess.resumeToken)
	raw, _ := json.Marshal(params)
	id := []byte(strconv.Quote("concord-stdio-resume-" + strconv.FormatInt(time.Now().UnixNano(), 36)))
	_ = up.ws.SetWriteDeadline(time.Now().Add(up.b.cfg.WriteTimeout))
	if err := up.ws.WriteMessage(websocket.TextMessage, rpc.RequestFrame(id, "map/connect", raw)); err != nil {
		return nil, err
	}
	_ = up.ws.SetReadDeadline(time.Now().Add(up.b.cfg.ResumeTimeout))
	for {
		_, data, err := up.ws.ReadMessage()
		if err != nil {
			return nil, err
		}
		if envs, batch := rpc.Envelopes(data); !batch && len(envs) == 1 &&
			envs[0].IsResponse && bytes.Equal(envs[0].ID, id) {
			return &replayResult{Result: envs[0].Result, Error: envs[0].Error}, nil
		}
		up.b.trk.received(data)
		up.b.out.line(data)
	}
}

type replayResult struct {
	Result json.RawMessage
	Error  json.RawMessage
}

// pump relays until the connection fails (that error), stdin ends
// (errStdinDone, after draining) or ctx is done (ctx.Err()). It owns the
// connection's reader goroutine and waits for it before returning.
func (up *upstream) pump(ctx context.Context, lines <-chan []byte) error {
	cfg := up.b.cfg
	idle := cfg.PingInterval + cfg.PongTimeout
	_ = up.ws.SetReadDeadline(time.Now().Add(idle))
	up.ws.SetPongHandler(func(string) error { return up.ws.SetReadDeadline(time.Now().Add(idle)) })
	readErr := make(chan error, 1)
	go func() { readErr <- up.readLoop() }()
	tick := time.NewTicker(cfg.PingInterval)
	defer tick.Stop()
	for {
		select {
		case msg, ok := <-lines:
			if !ok {
				up.drain(readErr)
				return errStdinDone
			}
			up.b.trk.sent(msg) // before the write: the answer may beat us back
			_ = up.ws.SetWriteDeadline(time.Now().Add(cfg.WriteTimeout))
			if err := up.ws.WriteMessage(websocket.TextMessage, msg); err != nil {
				_ = up.close()
				<-readErr
				return err
			}
		case <-tick.C:
			if err := up.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(cfg.WriteTimeout)); err != nil {
				_ = up.close()
				<-readErr
				return err
			}
		case err := <-readErr:
			_ = up.close()
			return err
		case <-ctx.Done():
			up.goodbye(readErr)
			return ctx.Err()
		}
	}
}

// close closes the connection promptly: after a write timed out toward a
// node that stopped reading, crypto/tls's close_notify would hold the
// bridge's reconnect 5 s more (federation/connclose).
func (up *upstream) close() error { return connclose.Close(up.ws.NetConn(), connclose.Grace) }

// readLoop writes every frame from the node to stdout as one line.
func (up *upstream) readLoop() error {
	for {
		_, data, err := up.ws.ReadMessage()
		if err != nil {
			return err
		}
		up.b.trk.received(data)
		up.b.out.line(data)
	}
}

// drain waits (up to DrainTimeout) for the answers to requests in flight,
// then closes.
func (up *upstream) drain(readErr chan error) {
	t := time.NewTimer(up.b.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-up.b.trk.emptied():
	case <-t.C:
	case err := <-readErr:
		readErr <- err // goodbye waits for it too
	}
	up.goodbye(readErr)
}

// goodbye sends a normal close, gives the node a moment to answer, then
// closes the socket and waits for the reader.
func (up *upstream) goodbye(readErr chan error) {
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "stdio bridge closing")
	_ = up.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(up.b.cfg.WriteTimeout))
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-readErr:
	case <-t.C:
		_ = up.close()
		<-readErr
	}
	_ = up.close()
}
