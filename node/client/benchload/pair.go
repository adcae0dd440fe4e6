package benchload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/bits"
	"strconv"
	"sync"
	"time"

	"github.com/concordmap/concord/node/rpc"
)

// pair is one sender→receiver stream of Send. The sender's fields belong to
// sendLoop until it returns; the receiver's to its connection's reader.
type pair struct {
	recvID string
	size   int
	start  time.Time
	cnt    *counters
	recv   *receiver
	prefix []byte // the params up to the sequence number

	sent, delivered int64
	ok              bitset // sequence numbers the node reported delivered
}

func newPair(recvID string, size int, start time.Time, cnt *counters) *pair {
	p := &pair{recvID: recvID, size: size, start: start, cnt: cnt}
	p.recv = &receiver{start: start, cnt: cnt}
	p.prefix = []byte(`{"to":{"agent":` + strconv.Quote(recvID) + `},"payload":{"bseq":`)
	return p
}

// pendingSend is a map/send whose reply has not been read.
type pendingSend struct {
	seq uint64
	p   *rpc.Pending
}

// sendLoop pipelines map/send on c until ctx ends, with at most window
// replies outstanding (plus the one being written); a second goroutine
// reads the replies in order.
func (p *pair) sendLoop(ctx context.Context, c *rpc.Conn, window int, timeout time.Duration) {
	pend := make(chan pendingSend, window)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.readReplies(pend, timeout)
	}()
	defer wg.Wait()
	defer close(pend)
	var buf []byte
	for seq := uint64(0); ctx.Err() == nil; seq++ {
		buf = p.params(buf[:0], seq)
		pd, err := c.Start(ctx, "map/send", json.RawMessage(buf))
		if err != nil {
			if ctx.Err() == nil {
				p.cnt.errors.Add(1)
			}
			if errors.Is(err, rpc.ErrClosed) || ctx.Err() != nil {
				return
			}
			continue
		}
		p.sent++
		pend <- pendingSend{seq: seq, p: pd}
	}
}

// readReplies marks every request the node answered with the receiver in
// "delivered"; any other answer is an error.
func (p *pair) readReplies(pend <-chan pendingSend, timeout time.Duration) {
	want := []byte(strconv.Quote(p.recvID))
	for ps := range pend {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		res, err := ps.p.Wait(ctx)
		cancel()
		if err != nil || !bytes.Contains(res, want) {
			p.cnt.errors.Add(1)
			continue
		}
		p.delivered++
		p.ok.set(ps.seq)
	}
}

// params appends map/send params whose payload is
// {"bseq":seq,"bt":ns since start,"pad":"x…"}, padded to p.size bytes.
func (p *pair) params(b []byte, seq uint64) []byte {
	b = append(b, p.prefix...)
	payloadStart := len(b) - len(`{"bseq":`)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"bt":`...)
	b = strconv.AppendInt(b, int64(time.Since(p.start)), 10)
	b = append(b, `,"pad":"`...)
	for n := p.size - (len(b) - payloadStart) - len(`"}`); n > 0; n-- {
		b = append(b, 'x')
	}
	return append(b, `"}}`...)
}

// receiver checks the messages of one pair as they arrive. Handle runs on
// the connection's reader goroutine; the counters are read after the
// connection is closed, except distinct, which is safe at any time.
type receiver struct {
	start time.Time
	cnt   *counters

	mu         sync.Mutex
	seen       bitset
	maxSeq     int64
	anySeen    bool
	received   int64
	duplicates int64
	reordered  int64
	hist       histogram
	last       time.Time
}

var errNotBench = errors.New("benchload: message without a bench sequence number")

// Handle implements rpc.Handler for the receiver's connection.
func (r *receiver) Handle(_ context.Context, _ *rpc.Conn, req *rpc.Request) (any, error) {
	if req.Method != "map/message" {
		return nil, nil
	}
	seq, sentAt, ok := parseBenchPayload(req.Params)
	if !ok {
		r.cnt.errors.Add(1)
		return nil, errNotBench
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen.set(uint64(seq)) {
		r.duplicates++
		return nil, nil
	}
	if r.anySeen && seq < r.maxSeq {
		r.reordered++
	}
	r.anySeen = true
	r.maxSeq = max(r.maxSeq, seq)
	r.received++
	r.last = now
	r.hist.record(now.Sub(r.start) - time.Duration(sentAt))
	r.cnt.done.Add(1)
	return nil, nil
}

// Closed implements rpc.Handler.
func (r *receiver) Closed(*rpc.Conn) {}

func (r *receiver) distinct() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.received
}

// parseBenchPayload finds the "bseq" and "bt" numbers our sender wrote;
// map/message's params carry the payload's bytes unchanged.
func parseBenchPayload(params []byte) (seq, sentAt int64, ok bool) {
	seq, ok1 := numberAfter(params, `"bseq":`)
	sentAt, ok2 := numberAfter(params, `"bt":`)
	return seq, sentAt, ok1 && ok2
}

func numberAfter(b []byte, key string) (int64, bool) {
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return 0, false
	}
	b = b[i+len(key):]
	end := 0
	for end < len(b) && b[end] >= '0' && b[end] <= '9' {
		end++
	}
	v, err := strconv.ParseInt(string(b[:end]), 10, 64)
	return v, err == nil
}

// bitset is a growable set of sequence numbers.
type bitset []uint64

// set adds i and reports whether it was already present.
func (s *bitset) set(i uint64) bool {
	w := int(i / 64)
	if w >= len(*s) {
		*s = append(*s, make([]uint64, w+1-len(*s))...)
	}
	m := uint64(1) << (i % 64)
	was := (*s)[w]&m != 0
	(*s)[w] |= m
	return was
}

// missingFrom counts the members of s that other lacks.
func (s *bitset) missingFrom(other *bitset) int64 {
	var n int64
	for w, word := range *s {
		var o uint64
		if w < len(*other) {
			o = (*other)[w]
		}
		n += int64(bits.OnesCount64(word &^ o))
	}
	return n
}
