package federation

import (
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// directRig is a main link to dc2 whose stream is up on server "a:1" of
// the peer's three, with a fake clock and wire; open brings up the
// direct stream to a server as its session would.
type directRig struct {
	t     *testing.T
	now   time.Time
	m     *Manager
	l     *outLink
	w     *wire
	wires map[string]*wire
}

func newDirectRig(t *testing.T) *directRig {
	r := &directRig{t: t, now: time.Unix(1000, 0), w: &wire{}, wires: map[string]*wire{}}
	cfg := DefaultConfig()
	cfg.SystemID, cfg.NodeID = "dc1", "n1"
	st := NewState()
	lk := &concordv1.FedLink{PeerSystemId: "dc2", PeerAddrs: []string{"a:1", "b:1", "c:1"}, Export: all, Import: all}
	if err := apply(t, st, cmdPut, &concordv1.FedLinkPut{Link: lk}); err != nil {
		t.Fatal(err)
	}
	r.m = &Manager{cfg: cfg, now: func() time.Time { return r.now }, log: discardLogger(),
		deps: Deps{State: st, IsLeader: func() bool { return false }}}
	r.l = newOutLink(r.m, lk)
	r.l.up, r.l.connectedTo = true, "a:1"
	r.l.attach(r.w, func() {})
	return r
}

// homes sets the imported directory: agent id -> home server.
func (r *directRig) homes(v uint64, homes map[string]string) {
	r.t.Helper()
	u := &concordv1.FedDirectoryApply{PeerSystemId: "dc2", Version: v, Full: true}
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range homes {
			if !yield(id) {
				return
			}
		}
	}) {
		u.Upserts = append(u.Upserts, &concordv1.FedRemoteAgent{Id: id, HomeAddr: homes[id]})
	}
	if err := apply(r.t, r.m.deps.State, cmdDir, u); err != nil {
		r.t.Fatal(err)
	}
}

// open brings the requested direct stream to addr up on a fake wire.
func (r *directRig) open(addr string) *outLink {
	r.t.Helper()
	r.l.dir.mu.Lock()
	d := r.l.dir.byAddr[addr]
	r.l.dir.mu.Unlock()
	if d == nil {
		r.t.Fatalf("no direct stream to %s was asked for", addr)
	}
	r.wires[addr] = &wire{}
	d.attach(r.wires[addr], func() {})
	d.directUp()
	return d
}

// bobDirect homes bob on b:1 and brings the direct stream there up (m1,
// which asked for it, took the main stream and was answered).
func (r *directRig) bobDirect() (*outLink, []Outcome) {
	r.t.Helper()
	r.homes(1, map[string]string{"bob": "b:1"})
	var out []Outcome
	r.send("bob", "m1", &out)
	ackLast(r.l, r.w)
	return r.open("b:1"), nil
}

// send sends one best-effort message to agent id and returns where it
// was written ("main", a direct server, or "" when not written yet).
func (r *directRig) send(id, msgID string, outcome *[]Outcome) string {
	r.t.Helper()
	var mu sync.Mutex
	r.l.send(&concordv1.FedEnvelope{SourceSystem: "dc1", TargetSystem: "dc2", ToAgent: id, MessageId: msgID},
		func(o Outcome) { mu.Lock(); defer mu.Unlock(); *outcome = append(*outcome, o) })
	if last(r.w) == msgID {
		return "main"
	}
	for addr, w := range r.wires {
		if last(w) == msgID {
			return addr
		}
	}
	return ""
}

func last(w *wire) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.batches) == 0 {
		return ""
	}
	b := w.batches[len(w.batches)-1]
	return b[len(b)-1].GetMessageId()
}

func ackLast(l *outLink, w *wire) {
	w.mu.Lock()
	b := w.batches[len(w.batches)-1]
	w.mu.Unlock()
	ackAll(l, b)
}

// TestDirect_StreamChoice: which stream a best-effort message to a
// remote agent takes, by what the directory says of its home.
func TestDirect_StreamChoice(t *testing.T) {
	for _, tc := range []struct {
		name, home string
		asked      bool // a direct stream was asked for
	}{
		{"home unknown (older exporter)", "", false},
		{"home is the main stream's server", "a:1", false},
		{"home not in the peer's server list", "z:9", false},
		{"home is another listed server", "b:1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newDirectRig(t)
			r.homes(1, map[string]string{"bob": tc.home})
			var out []Outcome
			// The first message takes the main stream either way: a
			// direct stream opens lazily.
			if got := r.send("bob", "m1", &out); got != "main" {
				t.Fatalf("first message went %q, want main", got)
			}
			r.l.dir.mu.Lock()
			_, asked := r.l.dir.byAddr[tc.home]
			r.l.dir.mu.Unlock()
			if asked != tc.asked {
				t.Fatalf("direct stream asked for: %v, want %v", asked, tc.asked)
			}
			ackLast(r.l, r.w)
			want := "main"
			if tc.asked {
				r.open(tc.home)
				want = tc.home
			}
			if got := r.send("bob", "m2", &out); got != want {
				t.Fatalf("second message went %q, want %q", got, want)
			}
		})
	}

	// Scopes, guaranteed-only paths and transit never go direct: a
	// message without to_agent, or for another system, takes the main
	// stream even when its name has a home.
	r := newDirectRig(t)
	r.homes(1, map[string]string{"bob": "b:1"})
	var out []Outcome
	r.send("bob", "m1", &out)
	ackLast(r.l, r.w)
	r.open("b:1")
	for _, env := range []*concordv1.FedEnvelope{
		{SourceSystem: "dc1", TargetSystem: "dc2", ToScope: "bob", MessageId: "scope"},
		{SourceSystem: "dc1", TargetSystem: "dc3", ToAgent: "bob", MessageId: "transit"},
	} {
		r.l.send(env, func(Outcome) {})
		if got := last(r.w); got != env.GetMessageId() {
			t.Fatalf("%s: main stream's last message %q", env.GetMessageId(), got)
		}
		ackLast(r.l, r.w)
	}
	// Off in the config: everything on the main stream.
	r.m.cfg.DirectStreams = false
	if got := r.send("bob", "off", &out); got != "main" {
		t.Fatalf("with DirectStreams off the message went %q", got)
	}
}

// TestDirect_SwitchRule: a target moves between the main stream and a
// direct one only when the stream its last messages took holds nothing
// (queued or unacknowledged); other targets are not held back by it.
func TestDirect_SwitchRule(t *testing.T) {
	r := newDirectRig(t)
	r.homes(1, map[string]string{"bob": "b:1", "carol": "b:1"})
	var out []Outcome
	steps := []struct {
		name string
		do   func() string
		want string
	}{
		{"first message, stream asked for", func() string { return r.send("bob", "m1", &out) }, "main"},
		{"direct up, m1 unacknowledged on main: bob stays", func() string { r.open("b:1"); return r.send("bob", "m2", &out) }, ""},
		{"m2 queued behind m1 on main", func() string { return r.send("bob", "m3", &out) }, ""},
		{"main flushed and acked: now direct", func() string {
			flushNow(t, r.l, r.w)
			ackLast(r.l, r.w)
			ackAll(r.l, r.w.batches[0])
			return r.send("bob", "m4", &out)
		}, "b:1"},
		{"main busy with another target: bob stays direct", func() string {
			r.send("dave", "d1", &out) // dave has no home: main
			return r.send("bob", "m5", &out)
		}, ""},
		{"home unknown now, m4 and m5 unacknowledged on the direct stream: bob stays there", func() string {
			r.homes(2, map[string]string{"carol": "b:1"})
			r.send("bob", "m6", &out)
			flushNow(t, r.l.dir.byAddr["b:1"], r.wires["b:1"])
			if last(r.wires["b:1"]) == "m6" {
				return "b:1"
			}
			return ""
		}, "b:1"},
		{"direct stream answered: bob back on main once it is quiet", func() string {
			d := r.l.dir.byAddr["b:1"]
			for _, b := range r.wires["b:1"].batches {
				ackAll(d, b)
			}
			ackLast(r.l, r.w) // d1
			return r.send("bob", "m7", &out)
		}, "main"},
	}
	for _, s := range steps {
		if got := s.do(); got != s.want {
			t.Fatalf("%s: went %q, want %q", s.name, got, s.want)
		}
	}
	// Whatever the stream, bob's messages left in order.
	var order []string
	for _, w := range []*wire{r.w, r.wires["b:1"]} {
		for _, b := range w.batches {
			for _, e := range b {
				if e.GetToAgent() == "bob" {
					order = append(order, e.GetMessageId())
				}
			}
		}
	}
	if want := []string{"m1", "m2", "m3", "m7", "m4", "m5", "m6"}; !slices.Equal(order, want) {
		t.Fatalf("bob's messages by stream: %v, want %v (main: m1-m3, m7; direct: m4-m6)", order, want)
	}
}

// TestDirect_Retire: a direct stream that breaks hands what it still
// queues to the main stream in order (its targets go back there), answers
// what awaited an ack 5000, and is not asked for again before a backoff;
// an idle one closes only when it holds nothing and was unused for
// DirectIdle.
func TestDirect_Retire(t *testing.T) {
	r := newDirectRig(t)
	d, out := r.bobDirect()
	r.send("bob", "m2", &out) // written inline, awaits its ack
	r.send("bob", "m3", &out) // queued behind it
	r.send("bob", "m4", &out)
	if r.l.dir.on["bob"] != d {
		t.Fatal("bob is not on the direct stream")
	}

	// Not idle: it holds messages.
	r.now = r.now.Add(2 * r.m.cfg.DirectIdle)
	if d.retire(directIdle) {
		t.Fatal("a direct stream holding messages closed as idle")
	}

	d.retire(directBroken)
	if len(out) != 1 || out[0].Err == nil || out[0].Err.Code != CodeUnavailable {
		t.Fatalf("outcomes after the break: %+v, want one 5000 for m2", out)
	}
	if _, ok := r.l.dir.on["bob"]; ok || r.l.dir.byAddr["b:1"] != nil {
		t.Fatal("the broken stream is still in use")
	}
	flushNow(t, r.l, r.w)
	if got := last(r.w); got != "m4" || len(r.w.batches[len(r.w.batches)-1]) != 2 {
		t.Fatalf("main stream's last batch ends %q, want m3, m4 moved in order", got)
	}
	ackLast(r.l, r.w)
	if len(out) != 3 || out[1].Err != nil || out[2].Err != nil {
		t.Fatalf("moved messages' outcomes %+v, want delivered", out)
	}

	// The backoff holds a new attempt back; then it is asked for again.
	if r.send("bob", "m5", &out); r.l.dir.byAddr["b:1"] != nil {
		t.Fatal("direct stream asked for again within its backoff")
	}
	ackLast(r.l, r.w)
	r.now = r.now.Add(2 * r.m.cfg.BackoffMax)
	r.send("bob", "m6", &out)
	ackLast(r.l, r.w)
	d2 := r.open("b:1")
	if got := r.send("bob", "m7", &out); got != "b:1" {
		t.Fatalf("after the backoff m7 went %q", got)
	}
	ackLast(d2, r.wires["b:1"])

	// Idle: only after DirectIdle unused with nothing in it.
	if d2.retire(directIdle) {
		t.Fatal("closed as idle right after use")
	}
	r.now = r.now.Add(r.m.cfg.DirectIdle)
	if !d2.retire(directIdle) || r.l.dir.byAddr["b:1"] != nil {
		t.Fatal("an unused, empty direct stream did not close")
	}
	if _, held := r.l.dir.retry["b:1"]; held {
		t.Fatal("an idle close holds the next attempt back")
	}
	// A stream that cannot be opened backs off longer with each failure.
	r.send("bob", "m8", &out)
	d3 := r.l.dir.byAddr["b:1"]
	d3.retire(directFailed)
	if r.l.dir.retry["b:1"].fails != 1 {
		t.Fatalf("retry after a failed open: %+v", r.l.dir.retry["b:1"])
	}
}

// TestDirect_StopFailsWhatItHolds: when the link stops, a direct stream's
// queued messages hear the link's error, not silence.
func TestDirect_StopFailsWhatItHolds(t *testing.T) {
	r := newDirectRig(t)
	d, out := r.bobDirect()
	r.send("bob", "m2", &out)
	r.send("bob", "m3", &out)
	stopErr := codeErr(CodeSystemNotFound, "removed", nil)
	r.l.stop(stopErr)
	d.retire(directBroken)
	// m3 (queued) hears the link's error, m2 (awaiting its ack) 5000.
	var codes []int
	for _, o := range out {
		if o.Err == nil {
			t.Fatalf("outcome %+v, want an error", o)
		}
		codes = append(codes, o.Err.Code)
	}
	if !slices.Equal(codes, []int{CodeSystemNotFound, CodeUnavailable}) {
		t.Fatalf("codes %v, want [%d %d]", codes, CodeSystemNotFound, CodeUnavailable)
	}
}

// TestDirect_UnlistedServerCloses: when the peer stops listing a server,
// the direct stream to it ends and no new one is asked for.
func TestDirect_UnlistedServerCloses(t *testing.T) {
	r := newDirectRig(t)
	d, out := r.bobDirect()
	ended := false
	d.end = func() { ended = true }
	lk := proto.CloneOf(r.l.policy())
	lk.PeerAddrs = []string{"a:1", "c:1"}
	r.l.update(lk)
	if !ended {
		t.Fatal("the direct stream to an unlisted server was not ended")
	}
	d.retire(directBroken) // what its session's end does
	if got := r.send("bob", "m2", &out); got != "main" {
		t.Fatalf("after the server left the list bob's message went %q", got)
	}
	r.l.dir.mu.Lock()
	defer r.l.dir.mu.Unlock()
	if r.l.dir.byAddr["b:1"] != nil {
		t.Fatal("a direct stream to an unlisted server was asked for")
	}
}
