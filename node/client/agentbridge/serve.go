package agentbridge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/concordmap/concord/node/client/mapclient"
)

// Serve connects to the system as the agent cfg.AgentID (participantType
// agent, participantId = the agent id, a grace-period disconnect policy so
// the agent survives a failover), runs the bridge until ctx ends, and
// closes the connection. client.OnMessage and the identity fields of
// client are set here. It returns early with an error when the client
// gives up reconnecting.
//
// connectTimeout bounds the first connection; 0 waits for a server until
// ctx ends (an agent may well start before the system).
func Serve(ctx context.Context, cfg Config, client mapclient.Config, connectTimeout time.Duration) error {
	b, err := New(cfg)
	if err != nil {
		return err
	}
	client.ParticipantType = mapclient.TypeAgent
	client.ParticipantID = cfg.AgentID
	if client.Name == "" {
		client.Name = cfg.Name
	}
	if client.DisconnectPolicy == nil {
		// The grace period must outlast a reconnect, or the agent would be
		// unregistered while it fails over.
		grace := max(client.ReconnectTimeout+30*time.Second, time.Minute)
		client.DisconnectPolicy = &mapclient.DisconnectPolicy{AgentBehavior: "grace-period", GracePeriodMs: grace.Milliseconds()}
	}
	client.OnMessage = b.Deliver
	dctx, dcancel := ctx, context.CancelFunc(func() {})
	if connectTimeout > 0 {
		dctx, dcancel = context.WithTimeout(ctx, connectTimeout)
	}
	c, err := mapclient.Dial(dctx, client)
	dcancel()
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	watch := make(chan struct{})
	go func() {
		defer close(watch)
		// The client stops for good only when reconnecting failed.
		select {
		case <-c.Done():
			cancel()
		case <-runCtx.Done():
		}
	}()
	runErr := b.Run(runCtx, c)
	cancel()
	<-watch
	cctx, ccancel := context.WithTimeout(context.Background(), cfg.ReplyTimeout)
	defer ccancel()
	closeErr := c.Close(cctx)
	if cerr := c.Err(); cerr != nil && !errors.Is(cerr, mapclient.ErrClosed) {
		return errors.Join(cerr, runErr)
	}
	return errors.Join(runErr, closeErr)
}
