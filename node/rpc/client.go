package rpc

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/gorilla/websocket"
)

// Dial opens a WebSocket MAP connection to url (ws:// or wss://). h serves
// what the server sends (nil: notifications are dropped, requests get
// -32601). ctx bounds the dial and handshake only. The returned Conn owns
// its goroutines: Close it and wait on Done to release them.
func Dial(ctx context.Context, url string, cfg ClientConfig, h Handler) (*Conn, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var cork *corkConn
	d := websocket.Dialer{
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			cork = newCorkConn(nc, cfg.WriteTimeout)
			return cork, nil
		},
		HandshakeTimeout: cfg.HandshakeTimeout,
		ReadBufferSize:   wsReadBufferSize,
		WriteBufferSize:  wsWriteBufferSize,
		WriteBufferPool:  wsWriteBufferPool,
		TLSClientConfig:  cfg.TLSConfig,
	}
	ws, resp, err := d.DialContext(ctx, url, cfg.Header)
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("rpc: dial %s: %w (HTTP %d)", url, err, resp.StatusCode)
		}
		return nil, fmt.Errorf("rpc: dial %s: %w", url, err)
	}
	if resp != nil && resp.Body != nil && resp.StatusCode != http.StatusSwitchingProtocols {
		_ = resp.Body.Close()
	}
	c := newConn(context.Background(), &cfg.Config, newWSTransport(ws, cork, cfg.Config, false), h)
	go func() { _ = c.run() }() // owned by c: Close + Done
	return c, nil
}
