package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/federation/connclose"
	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// mapDialer opens the connections of links of kind map on node/rpc: a
// WebSocket JSON-RPC peer whose notifications go to the link, and whose
// requests from the foreign server are refused (-32601).
func (s *Server) mapDialer() federation.MAPDialer {
	maxEnv := int64(s.cfg.Federation.MaxEnvelopeBytes)
	return func(ctx context.Context, link *concordv1.FedMapLink, onNotify func(string, json.RawMessage)) (federation.MAPConn, error) {
		cfg := rpc.DefaultClientConfig()
		// A relayed message is at most MaxEnvelopeBytes of payload and meta;
		// larger frames are refused by the peer layer, not buffered.
		if need := maxEnv + 64<<10; cfg.MaxFrameBytes < need {
			cfg.MaxFrameBytes = need
		}
		if ca := link.GetCaPem(); len(ca) > 0 {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(ca) {
				return nil, errors.New("map link CA: no certificate in PEM")
			}
			cfg.TLSConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}
		conn, err := rpc.Dial(ctx, link.GetUrl(), cfg, mapNotifyHandler(onNotify))
		if err != nil {
			// The URL may carry credentials: say only where it failed.
			cause := errors.Unwrap(err)
			if cause == nil {
				cause = errors.New("invalid connection settings")
			}
			return nil, fmt.Errorf("dial %s: %w", federation.RedactURL(link.GetUrl()), cause)
		}
		return mapConn{conn}, nil
	}
}

// mapNotifyHandler hands a foreign server's notifications to the link.
type mapNotifyHandler func(string, json.RawMessage)

func (h mapNotifyHandler) Handle(_ context.Context, _ *rpc.Conn, req *rpc.Request) (any, error) {
	if req.IsNotification() {
		h(req.Method, req.Params)
		return nil, nil
	}
	return nil, rpc.NewError(rpc.CodeMethodNotFound, "Method not found: "+req.Method)
}

func (mapNotifyHandler) Closed(*rpc.Conn) {}

// mapConn adapts *rpc.Conn to federation.MAPConn: an error answer becomes
// a *federation.CodeError with the server's code.
type mapConn struct{ c *rpc.Conn }

func (m mapConn) Call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	raw, err := m.c.Call(ctx, method, params)
	var re *rpc.Error
	if errors.As(err, &re) {
		return nil, &federation.CodeError{Code: re.Code, Message: re.Message}
	}
	return raw, err
}

func (m mapConn) Done() <-chan struct{} { return m.c.Done() }

// Close says goodbye if the close frame goes out within connclose.Grace,
// and otherwise cuts the socket: a foreign server that stopped reading
// would hold it WriteTimeout (10 s), and with it the link's stop and the
// node's shutdown.
func (m mapConn) Close() {
	_ = m.c.CloseWithin("map link closed", connclose.Grace)
}

// fedNodes lists this system's live servers' node ids: where the leader
// may place a map link's connection.
func (s *Server) fedNodes() []string {
	var out []string
	for _, m := range s.members.Members() {
		if m.Status == membership.StatusAlive && m.Role == membership.RoleServer {
			out = append(out, m.ID)
		}
	}
	return out
}
