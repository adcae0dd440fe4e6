package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/concordmap/concord/node"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// hostileMAP is a foreign MAP server (the far side of a link of kind map)
// that answers Concord with garbage of one kind (mode).
type hostileMAP struct {
	t    *testing.T
	mode string
	srv  *httptest.Server

	mu      sync.Mutex
	conns   map[*websocket.Conn]bool
	dials   int
	answers [][]byte // Concord's replies to the requests we sent it
	wg      sync.WaitGroup
}

func startHostileMAP(t *testing.T, mode string) *hostileMAP {
	h := &hostileMAP{t: t, mode: mode, conns: map[*websocket.Conn]bool{}}
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		h.mu.Lock()
		h.conns[c] = true
		h.dials++
		h.wg.Add(1)
		h.mu.Unlock()
		go func() {
			defer h.wg.Done()
			h.serve(c)
		}()
	}))
	t.Cleanup(func() {
		h.mu.Lock()
		for c := range h.conns {
			_ = c.Close()
		}
		h.mu.Unlock()
		h.wg.Wait()
		h.srv.Close()
	})
	return h
}

func (h *hostileMAP) url() string { return "ws" + strings.TrimPrefix(h.srv.URL, "http") + "/map" }

func (h *hostileMAP) dialCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dials
}

func (h *hostileMAP) serve(c *websocket.Conn) {
	defer func() {
		h.mu.Lock()
		delete(h.conns, c)
		h.mu.Unlock()
		_ = c.Close()
	}()
	write := func(s string) bool { return c.WriteMessage(websocket.TextMessage, []byte(s)) == nil }
	for {
		_, b, err := c.ReadMessage()
		if err != nil {
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		_ = json.Unmarshal(b, &m)
		if m.Method == "" { // Concord answering one of our requests
			h.mu.Lock()
			h.answers = append(h.answers, b)
			h.mu.Unlock()
			continue
		}
		reply := func(result string) bool {
			return write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID, result))
		}
		ok := true
		switch h.mode {
		case "garbage":
			ok = write("\x00{not json") && write(`[]`) && write(`{"jsonrpc":"2.0","id":424242,"result":{}}`) &&
				write(`{"jsonrpc":"2.0","id":"q1","method":"map/agents/register","params":{"agentId":"evil"}}`) &&
				write(`{"jsonrpc":"2.0","id":"q2","method":"map/connect","params":{"protocolVersion":1,"participantType":"system"}}`)
		case "wrong types":
			ok = reply(`"nope"`)
		case "oversized":
			ok = reply(`{"pad":"` + strings.Repeat("x", 3<<20) + `"}`)
		case "notification flood":
			switch m.Method {
			case "map/connect":
				ok = reply(`{"protocolVersion":1,"sessionId":"S1","participantId":"p1","capabilities":{}}`)
			case "map/agents/list":
				ok = reply(`{"agents":[{"id":"bad:id"},{"id":""},{"id":5},{"id":"good","name":"` + strings.Repeat("n", 5000) + `"},{"id":"fine","state":"idle"}]}`)
			default:
				ok = reply(`{}`)
			}
			for i := 0; ok && i < 200; i++ {
				ok = write(`{"jsonrpc":"2.0","method":"map/message","params":{"message":{"id":7,"from":{"x":1},"to":"nobody"}}}`) &&
					write(`{"jsonrpc":"2.0","method":"map/event","params":"garbage"}`) &&
					write(`{"jsonrpc":"2.0","method":"map/message","params":{"message":{"id":"m","from":"fine","to":{"agent":"not-ours"},"payload":1}}}`)
			}
		}
		if !ok {
			return
		}
	}
}

// TestProbe_MapLinkHostilePeer links the node to a foreign MAP server that
// speaks garbage of one kind each: the node keeps serving, imports only
// valid agents, answers the peer's requests with -32601, changes nothing
// else, and stops every connection when the link is removed.
func TestProbe_MapLinkHostilePeer(t *testing.T) {
	for _, mode := range []string{"garbage", "wrong types", "oversized", "notification flood"} {
		t.Run(mode, func(t *testing.T) {
			srv := startProbeNode(t, func(c *node.Config) {
				c.Federation.BackoffMin, c.Federation.BackoffMax = 20*time.Millisecond, 100*time.Millisecond
				c.Federation.DirectorySync = 100 * time.Millisecond
			})
			peer := startHostileMAP(t, mode)
			before := markState(srv)
			ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
			defer cancel()
			if _, err := srv.Federation().CreateMapLink(ctx, &concordv1.CreateMapLinkRequest{SystemId: "ext", Url: peer.url()}); err != nil {
				t.Fatalf("create map link: %v", err)
			}
			// "wrong types" fails the link's map/connect: it must dial again.
			// The others keep the socket (garbage frames are answered, not
			// fatal; calls left unanswered time out after CallTimeout).
			dials := 1
			if mode == "wrong types" {
				dials = 2
			}
			waitFor(t, func() error {
				if n := peer.dialCount(); n < dials {
					return fmt.Errorf("%d dials so far", n)
				}
				return nil
			})
			switch mode {
			case "garbage", "oversized":
				waitFor(t, func() error {
					peer.mu.Lock()
					defer peer.mu.Unlock()
					if len(peer.answers) == 0 {
						return fmt.Errorf("no answer to our requests yet")
					}
					return nil
				})
				peer.mu.Lock()
				answers := append([][]byte(nil), peer.answers...)
				peer.mu.Unlock()
				want := -32601 // our requests: Concord serves nothing to a foreign server
				if mode == "oversized" {
					want = -32600 // Message too large
				}
				for _, a := range answers {
					switch {
					case mode == "garbage" && strings.Contains(string(a), "empty batch"):
						checkError(t, a, wantErr{code: -32600, id: "null", category: "protocol"}) // our []
						continue
					case mode == "garbage" && !strings.Contains(string(a), `"id":"q`):
						checkError(t, a, wantErr{code: -32700, id: "null", category: "protocol"}) // our non-JSON frame
						continue
					}
					checkError(t, a, wantErr{code: want, category: "protocol"})
				}
			case "notification flood":
				waitFor(t, func() error {
					for _, st := range srv.Federation().Status() {
						if st.GetLink().GetPeerSystemId() == "ext" && st.GetImportedAgents() == 1 {
							return nil
						}
					}
					return fmt.Errorf("imported: %v", srv.Federation().Status())
				})
			}
			checkNodeServes(t, srv)
			now := markState(srv)
			if now.agents != before.agents || now.scopes != before.scopes {
				t.Fatalf("the foreign peer changed local state: %+v -> %+v", before, now)
			}
			if _, err := srv.Federation().Unlink(ctx, "ext", true); err != nil {
				t.Fatalf("unlink: %v", err)
			}
			waitFor(t, func() error {
				peer.mu.Lock()
				defer peer.mu.Unlock()
				if len(peer.conns) > 0 {
					return fmt.Errorf("%d connections still open after unlink", len(peer.conns))
				}
				return nil
			})
		})
	}
}
