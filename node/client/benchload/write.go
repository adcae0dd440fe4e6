package benchload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/concordmap/concord/node/rpc"
)

// WriteConfig configures Write. Start from DefaultWriteConfig.
type WriteConfig struct {
	// URLs are MAP WebSocket endpoints; client i connects to URLs[i%len].
	URLs []string
	// Clients is the number of connections, each with one write in flight.
	Clients int
	// Duration is how long writes are issued (setup not included).
	Duration time.Duration
	// CallTimeout bounds one write; a write that takes longer counts as an
	// error.
	CallTimeout time.Duration
	// Progress receives a line a second; nil prints nothing.
	Progress io.Writer
	// RPC configures every connection.
	RPC rpc.ClientConfig
	// Auth is the participants' credential (zero: anonymous).
	Auth Credential
}

// DefaultWriteConfig returns 16 clients for 10 s; URLs must be set.
func DefaultWriteConfig() WriteConfig {
	return WriteConfig{Clients: 16, Duration: 10 * time.Second, CallTimeout: 10 * time.Second, RPC: rpc.DefaultClientConfig()}
}

// Validate reports the first field out of range.
func (c WriteConfig) Validate() error {
	switch {
	case len(c.URLs) == 0:
		return errors.New("benchload: at least one URL is required")
	case c.Clients < 1:
		return fmt.Errorf("benchload: clients %d < 1", c.Clients)
	case c.Duration <= 0 || c.CallTimeout <= 0:
		return errors.New("benchload: duration and call timeout must be > 0")
	}
	return c.RPC.Validate()
}

// WriteResult is Write's summary; the JSON names are a stable contract
// (scripts read them).
type WriteResult struct {
	Clients      int     `json:"clients"`
	DurationS    float64 `json:"duration_s"`
	Total        int64   `json:"total"`
	Errors       int64   `json:"errors"`
	WritesPerSec float64 `json:"writes_per_sec"`
	Percentiles
}

// Write measures committed writes: every client registers its own agent,
// then updates its metadata (map/agents/update, one Raft entry each) in a
// loop, one request in flight, until Duration has passed. Only writes the
// node acknowledged count in Total and in the latencies.
func Write(ctx context.Context, cfg WriteConfig) (WriteResult, error) {
	if err := cfg.Validate(); err != nil {
		return WriteResult{}, err
	}
	run := runID()
	conns := make([]*rpc.Conn, cfg.Clients)
	defer closeConns(conns)
	err := parallel(cfg.Clients, 32, func(i int) error {
		dctx, cancel := context.WithTimeout(ctx, cfg.CallTimeout)
		defer cancel()
		c, err := dialAgent(dctx, pick(cfg.URLs, i), cfg.RPC, cfg.Auth, nil, agentName("w", run, i))
		conns[i] = c
		return err
	})
	if err != nil {
		return WriteResult{}, fmt.Errorf("set up write clients: %w", err)
	}

	var cnt counters
	hists := make([]histogram, cfg.Clients)
	wctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	prog := startProgress(cfg.Progress, "write", &cnt)
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			writeLoop(wctx, c, agentName("w", run, i), cfg.CallTimeout, &hists[i], &cnt)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	prog.stop()
	if err := ctx.Err(); err != nil {
		return WriteResult{}, err
	}

	var all histogram
	for i := range hists {
		all.merge(&hists[i])
	}
	total := cnt.done.Load()
	return WriteResult{
		Clients:      cfg.Clients,
		DurationS:    elapsed.Seconds(),
		Total:        total,
		Errors:       cnt.errors.Load(),
		WritesPerSec: float64(total) / elapsed.Seconds(),
		Percentiles:  all.percentiles(),
	}, nil
}

// writeLoop updates agentID until ctx ends. A write cut short by the end of
// the run is neither a success nor an error.
func writeLoop(ctx context.Context, c *rpc.Conn, agentID string, timeout time.Duration, h *histogram, cnt *counters) {
	for n := 0; ctx.Err() == nil; n++ {
		params := mustJSON(map[string]any{"agentId": agentID, "metadata": map[string]int{"bench": n}})
		cctx, cancel := context.WithTimeout(context.Background(), timeout)
		t0 := time.Now()
		_, err := c.Call(cctx, "map/agents/update", params)
		d := time.Since(t0)
		cancel()
		switch {
		case err == nil:
			h.record(d)
			cnt.done.Add(1)
		case errors.Is(err, rpc.ErrClosed):
			cnt.errors.Add(1)
			return
		default:
			cnt.errors.Add(1)
		}
	}
}

func agentName(kind, run string, i int) string { return fmt.Sprintf("bench-%s-%s-%d", kind, run, i) }
