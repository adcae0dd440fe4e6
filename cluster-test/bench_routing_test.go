package clustertest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// BenchmarkRouting_CrossNode: messages per second from one agent on node 1
// to one agent on node 2 over MAP, 256-byte payloads. The sender is a raw
// WebSocket client that pipelines map/send frames (at most benchWindow
// unanswered), as a busy agent does; every reply is checked to name the
// recipient as delivered (the receiving node acknowledged it) and every
// message must reach the receiver. Beside it, in the same run: the same
// path without TLS (what TLS on the WebSocket and the relay costs), the same
// client and frames to an agent on the sender's own node (the MAP cost
// without the relay), and the baselines — a raw gRPC bidirectional stream
// on loopback carrying the same message bytes, once one message per stream
// Send and once in batches of 64 (the relay's transport at its best, with
// no MAP, routing or per-message acknowledgement).
func BenchmarkRouting_CrossNode(b *testing.B) {
	b.Run("map-send/node1-to-node2", func(b *testing.B) { benchMAPSend(b, 1) })
	b.Run("reference-map-send/node1-to-node2/no-tls", func(b *testing.B) { benchMAPSend(b, 1, WithInsecure()) })
	b.Run("reference-map-send/same-node", func(b *testing.B) { benchMAPSend(b, 0) })
	b.Run("baseline-raw-grpc-stream/unbatched", func(b *testing.B) { benchRawStream(b, 1) })
	b.Run("baseline-raw-grpc-stream/batch=64", func(b *testing.B) { benchRawStream(b, 64) })
}

// benchWindow bounds the sender's unanswered requests; it stays below
// rpc's MaxDeferred and SendQueueLen so neither backpressure nor the
// slow-consumer rule decides the figure.
const benchWindow = 512

// benchPayload256 is a 256-byte JSON string payload.
var benchPayload256 = `"` + strings.Repeat("x", 254) + `"`

func benchMAPSend(b *testing.B, receiverNode int, opts ...Option) {
	c := New(b, 2, append([]Option{WithLogLevel(slog.LevelWarn)}, opts...)...)
	cork := &corkedConn{}
	src := rawAgent(b, c.Nodes()[0].MAPURL(), "src", cork)
	dst := rawAgent(b, c.Nodes()[receiverNode].MAPURL(), "dst", nil)
	c.RequireConverged(b)
	pipelineSends(b, cork, src, dst, `{"agent":"dst"}`, `"delivered":["dst"]`)
}

// pipelineSends sends b.N map/send frames addressed to `to` from src
// (corked) and waits until dst received them all and src has every
// answer; an answer without delivered (the marker) counts as a failure.
func pipelineSends(b *testing.B, cork *corkedConn, src, dst *websocket.Conn, to, delivered string) {
	frame := []byte(`{"jsonrpc":"2.0","id":7,"method":"map/send","params":{"to":` + to + `,"payload":` + benchPayload256 + `}}`)
	var received, answered, failed atomic.Int64
	progress := make(chan struct{}, 1)
	readErr := make(chan error, 2)
	count := func(ws *websocket.Conn, n *atomic.Int64, check func([]byte) bool) {
		for n.Load() < int64(b.N) {
			_, data, err := ws.ReadMessage()
			if err != nil {
				readErr <- err
				return
			}
			if !check(data) {
				continue
			}
			n.Add(1)
			select {
			case progress <- struct{}{}:
			default:
			}
		}
		readErr <- nil
	}
	b.ResetTimer()
	start := time.Now()
	go count(dst, &received, func(d []byte) bool { return bytes.Contains(d, []byte(`"map/message"`)) })
	go count(src, &answered, func(d []byte) bool {
		if !bytes.Contains(d, []byte(delivered)) {
			failed.Add(1)
		}
		return true
	})
	for sent := range b.N {
		if sent%benchFlushEvery == 0 {
			cork.flush(b)
		}
		for int64(sent)-answered.Load() >= benchWindow || int64(sent)-received.Load() >= 2*benchWindow {
			cork.flush(b)
			select {
			case <-progress:
			case err := <-readErr:
				b.Fatalf("reader stopped (sent %d, answered %d, received %d): %v", sent, answered.Load(), received.Load(), err)
			case <-time.After(DeliveryTimeout):
				b.Fatalf("no progress: sent %d, answered %d, received %d", sent, answered.Load(), received.Load())
			}
		}
		if err := src.WriteMessage(websocket.TextMessage, frame); err != nil {
			b.Fatal(err)
		}
	}
	cork.flush(b)
	for range 2 {
		select {
		case err := <-readErr:
			if err != nil {
				b.Fatal(err)
			}
		case <-time.After(DeliveryTimeout):
			b.Fatalf("answered %d, received %d of %d", answered.Load(), received.Load(), b.N)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
	reportFailures(b, failed.Load())
}

// benchFlushEvery is how many frames the sender coalesces into one write:
// a pipelining client batches its socket writes as the node does its own
// (and as gRPC does under the baseline), instead of one syscall per frame.
const benchFlushEvery = 32

// corkedConn, once corked, buffers a client connection's writes until
// flush (or until the buffer fills). Writes may come from two goroutines:
// the sender's frames and gorilla's control replies.
type corkedConn struct {
	mu sync.Mutex
	net.Conn
	w      *bufio.Writer
	corked bool
}

func (c *corkedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.corked {
		return c.Conn.Write(p)
	}
	return c.w.Write(p)
}

func (c *corkedConn) cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

func (c *corkedConn) flush(b *testing.B) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.w.Flush(); err != nil {
		b.Fatal(err)
	}
}

// corkedDialer dials with its writes through cork when cork is set.
func corkedDialer(cork *corkedConn) *websocket.Dialer { return corkedDialerTLS(cork, ClientTLS()) }

// corkedDialerTLS is corkedDialer trusting tlsCfg (another system's CA).
func corkedDialerTLS(cork *corkedConn, tlsCfg *tls.Config) *websocket.Dialer {
	dialer := *websocket.DefaultDialer
	dialer.TLSClientConfig = tlsCfg
	if cork != nil {
		dialer.NetDialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			cork.Conn, cork.w = nc, bufio.NewWriterSize(nc, 64<<10)
			return cork, nil
		}
	}
	return &dialer
}

// rawAgent connects a raw WebSocket client as agent id and registers it.
// With cork set, the client's writes go through it, corked once the agent
// is registered (the caller flushes from then on).
func rawAgent(b *testing.B, url, id string, cork *corkedConn) *websocket.Conn {
	b.Helper()
	return connectRaw(b, rawDial(b, url, cork), id, cork, "")
}

// connectRaw makes ws agent id (map/connect, with token as its bearer
// credential unless empty, and map/agents/register), then corks it when
// cork is set.
func connectRaw(b *testing.B, ws *websocket.Conn, id string, cork *corkedConn, token string) *websocket.Conn {
	b.Helper()
	auth := ""
	if token != "" {
		auth = `,"auth":{"method":"bearer","token":"` + token + `"}`
	}
	calls := []string{
		`{"jsonrpc":"2.0","id":1,"method":"map/connect","params":{"protocolVersion":1,"participantType":"agent","participantId":"` + id + `"` + auth + `}}`,
		`{"jsonrpc":"2.0","id":2,"method":"map/agents/register","params":{"agentId":"` + id + `"}}`,
	}
	deadline := time.Now().Add(DeliveryTimeout)
	for i := 0; i < len(calls); {
		if err := ws.WriteMessage(websocket.TextMessage, []byte(calls[i])); err != nil {
			b.Fatal(err)
		}

		_ = ws.SetReadDeadline(deadline)
		_, data, err := ws.ReadMessage()
		switch {
		case err == nil && bytes.Contains(data, []byte(`"result"`)):
			i++
		case err == nil && bytes.Contains(data, []byte(`"retryable":true`)) && time.Now().Before(deadline):
			time.Sleep(50 * time.Millisecond) // an election under way: retry the call
		default:
			b.Fatalf("call %d for %s: %s %v", i+1, id, data, err)
		}
	}
	_ = ws.SetReadDeadline(time.Time{})
	if cork != nil {
		cork.cork()
	}
	return ws
}

// rawRelay is a Cluster service that only counts relayed envelopes and
// acknowledges each batch.
type rawRelay struct {
	concordv1.UnimplementedClusterServer
	got atomic.Int64
}

func (r *rawRelay) Relay(s concordv1.Cluster_RelayServer) error {
	for {
		batch, err := s.Recv()
		if err != nil {
			return nil
		}
		r.got.Add(int64(len(batch.GetEnvelopes())))
		envs := batch.GetEnvelopes()
		if err := s.Send(&concordv1.RelayAck{UpToSeq: envs[len(envs)-1].GetSeq()}); err != nil {
			return nil
		}
	}
}

func benchRawStream(b *testing.B, batchLen int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	relay := &rawRelay{}
	concordv1.RegisterClusterServer(srv, relay)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	defer func() { srv.Stop(); <-served }()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := concordv1.NewClusterClient(conn).Relay(ctx)
	if err != nil {
		b.Fatal(err)
	}
	acks := make(chan struct{})
	go func() { // drain acks until the stream ends
		defer close(acks)
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	msg := []byte(`{"id":"01JBENCHMARKMESSAGE000000","from":"src","to":{"agent":"dst"},"payload":` + benchPayload256 + `,"meta":{"timestamp":1730000000000}}`)
	batch := &concordv1.RelayBatch{FromNodeId: "n1"}
	start := time.Now()
	var n uint64
	for b.Loop() {
		n++
		batch.Envelopes = append(batch.Envelopes, &concordv1.RelayEnvelope{
			Seq: n, Kind: concordv1.RelayKind_RELAY_KIND_MESSAGE, Message: msg, RecipientAgentId: "dst",
		})
		if len(batch.Envelopes) == batchLen {
			if err := stream.Send(batch); err != nil {
				b.Fatal(err)
			}
			batch = &concordv1.RelayBatch{FromNodeId: "n1"}
		}
	}
	if len(batch.Envelopes) > 0 {
		if err := stream.Send(batch); err != nil {
			b.Fatal(err)
		}
	}
	_ = stream.CloseSend()
	for relay.got.Load() < int64(n) {
		time.Sleep(time.Millisecond) // the server is still counting the tail
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
	<-acks
}
