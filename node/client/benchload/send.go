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

// SendConfig configures Send. Start from DefaultSendConfig.
type SendConfig struct {
	// URLs are MAP WebSocket endpoints. Pair i's sender connects to
	// URLs[i%len] and its receiver to URLs[(i+1)%len], so with several URLs
	// every message crosses nodes.
	URLs []string
	// Pairs is the number of sender/receiver agent pairs.
	Pairs int
	// Size is each message's payload size in bytes (a JSON object carrying
	// the sequence number and send time, padded; at least ~40 bytes).
	Size int
	// Duration is how long messages are sent (setup and drain not included).
	Duration time.Duration
	// Window bounds each sender's unanswered map/send requests. Keep it
	// below the node's MaxDeferred and SendQueueLen (1024 and 4096 by
	// default) or backpressure rather than the node's speed sets the figure.
	Window int
	// DrainTimeout bounds the wait, after the last send, for messages still
	// under way; whatever has not arrived by then is lost.
	DrainTimeout time.Duration
	// CallTimeout bounds setup calls and the wait for one send's reply.
	CallTimeout time.Duration
	// Progress receives a line a second; nil prints nothing.
	Progress io.Writer
	// RPC configures every connection.
	RPC rpc.ClientConfig
	// Auth is the participants' credential (zero: anonymous).
	Auth Credential
}

// DefaultSendConfig returns 16 pairs of 256-byte messages for 10 s, a
// window of 256.
func DefaultSendConfig() SendConfig {
	return SendConfig{
		Pairs: 16, Size: 256, Duration: 10 * time.Second, Window: 256,
		DrainTimeout: 5 * time.Second, CallTimeout: 10 * time.Second, RPC: rpc.DefaultClientConfig(),
	}
}

// Validate reports the first field out of range.
func (c SendConfig) Validate() error {
	switch {
	case len(c.URLs) == 0:
		return errors.New("benchload: at least one URL is required")
	case c.Pairs < 1 || c.Window < 1 || c.Size < 0:
		return fmt.Errorf("benchload: pairs %d and window %d must be >= 1, size %d >= 0", c.Pairs, c.Window, c.Size)
	case c.Duration <= 0 || c.DrainTimeout < 0 || c.CallTimeout <= 0:
		return errors.New("benchload: duration and call timeout must be > 0, drain timeout >= 0")
	}
	return c.RPC.Validate()
}

// SendResult is Send's summary. Sent counts requests written; Delivered the
// replies naming the receiver as delivered; Errors the failed requests and
// replies (DELIVERY_FAILED, timeouts). Received counts distinct messages
// that arrived; Lost the delivered ones that never did; Duplicates the
// messages that arrived again; Reordered those that arrived after a later
// message of the same sender. MsgsPerSec is Received over the time from the
// first send to the last arrival; latencies are from send to arrival.
type SendResult struct {
	Pairs      int     `json:"pairs"`
	SizeBytes  int     `json:"size_bytes"`
	DurationS  float64 `json:"duration_s"`
	Sent       int64   `json:"sent"`
	Delivered  int64   `json:"delivered"`
	Received   int64   `json:"received"`
	Errors     int64   `json:"errors"`
	Lost       int64   `json:"lost"`
	Duplicates int64   `json:"duplicates"`
	Reordered  int64   `json:"reordered"`
	MsgsPerSec float64 `json:"msgs_per_sec"`
	Percentiles
}

// Send runs Pairs senders pipelining map/send to their receivers for
// Duration, waits for the messages under way, and checks every arrival.
func Send(ctx context.Context, cfg SendConfig) (SendResult, error) {
	if err := cfg.Validate(); err != nil {
		return SendResult{}, err
	}
	run := runID()
	start := time.Now() // the clock every payload's send time is read against
	var cnt counters
	pairs := make([]*pair, cfg.Pairs)
	senders := make([]*rpc.Conn, cfg.Pairs)
	receivers := make([]*rpc.Conn, cfg.Pairs)
	defer closeConns(senders)
	defer closeConns(receivers)
	err := parallel(cfg.Pairs, 16, func(i int) error {
		p := newPair(agentName("r", run, i), cfg.Size, start, &cnt)
		pairs[i] = p
		dctx, cancel := context.WithTimeout(ctx, cfg.CallTimeout)
		defer cancel()
		var err error
		if receivers[i], err = dialAgent(dctx, pick(cfg.URLs, i+1), cfg.RPC, cfg.Auth, p.recv, p.recvID); err != nil {
			return err
		}
		senders[i], err = dialAgent(dctx, pick(cfg.URLs, i), cfg.RPC, cfg.Auth, nil, agentName("s", run, i))
		return err
	})
	if err != nil {
		return SendResult{}, fmt.Errorf("set up send pairs: %w", err)
	}

	prog := startProgress(cfg.Progress, "send", &cnt)
	sctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	sendStart := time.Now()
	var wg sync.WaitGroup
	for i, p := range pairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.sendLoop(sctx, senders[i], cfg.Window, cfg.CallTimeout)
		}()
	}
	wg.Wait()
	drain(ctx, pairs, cfg.DrainTimeout)
	prog.stop()
	closeConns(receivers) // the receivers' handlers have returned after this
	if err := ctx.Err(); err != nil {
		return SendResult{}, err
	}
	return summarise(cfg, pairs, sendStart, &cnt), nil
}

// drain waits until every pair received as many distinct messages as were
// reported delivered, or until timeout.
func drain(ctx context.Context, pairs []*pair, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		behind := false
		for _, p := range pairs {
			if p.recv.distinct() < p.delivered {
				behind = true
				break
			}
		}
		if !behind {
			return
		}
		time.Sleep(10 * time.Millisecond) // polling a counter; nothing to wait on
	}
}

func summarise(cfg SendConfig, pairs []*pair, sendStart time.Time, cnt *counters) SendResult {
	res := SendResult{Pairs: cfg.Pairs, SizeBytes: cfg.Size, DurationS: cfg.Duration.Seconds(), Errors: cnt.errors.Load()}
	var all histogram
	var last time.Time
	for _, p := range pairs {
		r := p.recv
		res.Sent += p.sent
		res.Delivered += p.delivered
		res.Received += r.received
		res.Duplicates += r.duplicates
		res.Reordered += r.reordered
		res.Lost += p.ok.missingFrom(&r.seen)
		all.merge(&r.hist)
		if r.last.After(last) {
			last = r.last
		}
	}
	if d := last.Sub(sendStart); res.Received > 0 && d > 0 {
		res.MsgsPerSec = float64(res.Received) / d.Seconds()
	}
	res.Percentiles = all.percentiles()
	return res
}
