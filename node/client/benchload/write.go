package benchload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
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
	prog := startProgress(cfg.Progress, "write", &cnt) // before the run's clock: a run of Duration >= 1s shows a line
	wctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
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
// the run is neither a success nor an error. The load generator shares the
// machine with the nodes it measures, so its own CPU per write is kept low
// (raftstore/DESIGN.md, issue 10): the params are appended into one buffer
// instead of going through encoding/json, and one timer bounds each write
// instead of a context per write; the frames sent are the same.
func writeLoop(ctx context.Context, c *rpc.Conn, agentID string, timeout time.Duration, h *histogram, cnt *counters) {
	dl := newCallDeadline(timeout)
	defer dl.stop()
	quoted := mustJSON(agentID)
	var params []byte
	for n := 0; ctx.Err() == nil; n++ {
		params = updateParams(params[:0], quoted, n)
		cctx := dl.begin()
		t0 := time.Now()
		_, err := c.Call(cctx, "map/agents/update", json.RawMessage(params))
		d := time.Since(t0)
		dl.end()
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

// updateParams appends the params of write n: the bytes json.Marshal
// gives for {"agentId": id, "metadata": {"bench": n}} (keys sorted),
// quotedID being the id already encoded as a JSON string.
func updateParams(b, quotedID []byte, n int) []byte {
	b = append(b, `{"agentId":`...)
	b = append(b, quotedID...)
	b = append(b, `,"metadata":{"bench":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, "}}"...)
}

// callDeadline bounds one call at a time by timeout with one timer: begin
// arms it and returns the context to call with, end disarms it. Once it
// fired (a call took too long), the next begin starts a fresh context.
type callDeadline struct {
	timeout time.Duration
	ctx     context.Context
	cancel  context.CancelFunc
	t       *time.Timer
}

func newCallDeadline(timeout time.Duration) *callDeadline {
	d := &callDeadline{timeout: timeout}
	d.renew()
	return d
}

func (d *callDeadline) renew() {
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.t = time.AfterFunc(time.Hour, d.cancel)
	d.t.Stop()
}

func (d *callDeadline) begin() context.Context {
	d.t.Reset(d.timeout)
	return d.ctx
}

func (d *callDeadline) end() {
	if !d.t.Stop() {
		// Fired (or firing): its context is cancelled or about to be.
		d.cancel()
		d.renew()
	}
}

func (d *callDeadline) stop() {
	d.t.Stop()
	d.cancel()
}

func agentName(kind, run string, i int) string { return fmt.Sprintf("bench-%s-%s-%d", kind, run, i) }
