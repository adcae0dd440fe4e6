package node

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// httpDrainTimeout bounds how long a node's shutdown waits for HTTP
// requests in progress before it closes their connections. A response
// written to a client that stopped reading (a frozen scraper or browser)
// has no deadline: http.Server has no WriteTimeout, which would cut the
// long-lived SSE streams. Waiting for it until the caller's context
// ended spent the node's whole shutdown budget (10 s) there, and Raft's
// shutdown then started with an expired context.
const httpDrainTimeout = 2 * time.Second

// shutdownHTTP shuts srv down, waiting for requests in progress up to
// bound (or ctx), and then closes the connections still open. It returns
// ctx's error when ctx ended first; requests cut at bound are logged by
// the caller, not an error (cut reports them).
func shutdownHTTP(ctx context.Context, srv *http.Server, bound time.Duration) (cut bool, err error) {
	dctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	err = srv.Shutdown(dctx)
	if err == nil {
		return false, nil
	}
	_ = srv.Close()
	if ctx.Err() != nil {
		return true, err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true, nil
	}
	return true, err
}
