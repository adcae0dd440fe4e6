//go:build linux

package wannet

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Shape is what a link does to packets, the same each way.
type Shape struct {
	// Delay is the one-way delay every packet gets (RTT is twice this).
	Delay time.Duration
	// Jitter spreads the delay uniformly over Delay±Jitter; packets are
	// never reordered (a late one holds back those behind it, as on a
	// single path).
	Jitter time.Duration
	// Loss is the fraction of packets dropped, 0..1 (1 is a blackhole).
	Loss float64
}

// Stats counts a link's packets, both directions together.
type Stats struct {
	// Forwarded reached the other side; Dropped were lost by the shape or
	// a cut, or overflowed the link's queue.
	Forwarded, Dropped uint64
}

// queueLen bounds the packets in flight per direction (netem's default
// limit is 1000); more are dropped, as a full router queue does.
const queueLen = 4096

// mtu is the links' MTU, an Ethernet path's.
const mtu = 1500

// Link joins two namespaces with a TUN device in each and carries IP
// packets between them with its Shape. Methods may be called from any
// goroutine; Close stops it.
type Link struct {
	a, b       *Namespace
	devA, devB string
	fa, fb     *os.File

	shape     atomic.Pointer[Shape]
	cut       atomic.Bool
	rec       recorder
	forwarded atomic.Uint64
	dropped   atomic.Uint64

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// linkSeq numbers TUN devices per process (names are per namespace).
var linkSeq atomic.Uint64

// Connect joins a and b with shape: each gets a TUN device routing the
// other's address. The packet pumps run until Close.
func Connect(a, b *Namespace, shape Shape) (*Link, error) {
	if shape.Loss < 0 || shape.Loss > 1 || shape.Delay < 0 || shape.Jitter < 0 || shape.Jitter > shape.Delay {
		return nil, fmt.Errorf("wannet: bad shape %+v (0<=Loss<=1, 0<=Jitter<=Delay)", shape)
	}
	n := linkSeq.Add(1)
	l := &Link{a: a, b: b, devA: fmt.Sprintf("wan%d", n), devB: fmt.Sprintf("wan%d", n), stop: make(chan struct{})}
	l.shape.Store(&shape)
	var err error
	if l.fa, err = openTUN(a, l.devA, b); err != nil {
		return nil, err
	}
	if l.fb, err = openTUN(b, l.devB, a); err != nil {
		_ = l.fa.Close()
		return nil, err
	}
	l.pump(l.fa, l.fb, a.Name)
	l.pump(l.fb, l.fa, b.Name)
	return l, nil
}

// openTUN makes a TUN device named dev inside ns routing peer's address
// (source: ns's own), up, and returns its packet file.
func openTUN(ns *Namespace, dev string, peer *Namespace) (*os.File, error) {
	var f *os.File
	err := ns.inside(func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(dev)
		if err != nil {
			_ = unix.Close(fd)
			return fmt.Errorf("tun name %q: %w", dev, err)
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			_ = unix.Close(fd)
			return fmt.Errorf("TUNSETIFF %s: %w", dev, err)
		}
		// Non-blocking: os.NewFile then waits in the runtime poller, and
		// Close wakes a pending Read.
		if err := unix.SetNonblock(fd, true); err != nil {
			_ = unix.Close(fd)
			return fmt.Errorf("tun non-blocking: %w", err)
		}
		f = os.NewFile(uintptr(fd), dev)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("wannet: tun %s in %s: %w", dev, ns.Name, err)
	}
	for _, args := range [][]string{
		{"link", "set", "dev", dev, "mtu", fmt.Sprint(mtu), "up"},
		{"route", "add", peer.IP.String() + "/32", "dev", dev, "src", ns.IP.String()},
	} {
		if err := ns.ip(args...); err != nil {
			_ = f.Close()
			return nil, err
		}
	}
	return f, nil
}

// packet is one IP packet on its way, due at its delivery time.
type packet struct {
	due  int64     // monotonic clock, ns (monoNow)
	read time.Time // when the link took it
	data []byte
}

// pump moves packets from src (the device in namespace from) to dst: a
// reader that stamps (or drops) each packet, and a writer that delivers
// it when due.
func (l *Link) pump(src, dst *os.File, from string) {
	q := make(chan packet, queueLen)
	l.wg.Add(2)
	go func() { defer l.wg.Done(); defer close(q); l.read(src, q) }()
	go func() { defer l.wg.Done(); l.write(dst, q, from) }()
}

func (l *Link) read(src *os.File, q chan<- packet) {
	var last int64
	buf := make([]byte, 1<<16)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return // closed
		}
		s := l.shape.Load()
		if l.cut.Load() || (s.Loss > 0 && rand.Float64() < s.Loss) {
			l.dropped.Add(1)
			continue
		}
		d := s.Delay
		if s.Jitter > 0 {
			d += time.Duration(rand.Int64N(int64(2*s.Jitter)+1)) - s.Jitter
		}
		read := time.Now()
		due := max(monoNow()+int64(d), last) // no reordering
		last = due
		select {
		case q <- packet{due: due, read: read, data: append([]byte(nil), buf[:n]...)}:
		default:
			l.dropped.Add(1)
		}
	}
}

// write delivers the packets of q when due, on a thread of its own
// (clock.go). Close waits for the packet it holds: at most the delay.
func (l *Link) write(dst *os.File, q <-chan packet, from string) {
	preciseThread()
	for p := range q {
		select {
		case <-l.stop:
			return
		default:
		}
		sleepUntil(p.due)
		if _, err := dst.Write(p.data); err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			l.dropped.Add(1) // device down: the packet is lost
			continue
		}
		l.forwarded.Add(1)
		l.rec.add(Packet{From: from, Size: len(p.data), Read: p.read, Sent: time.Now(), Late: time.Duration(monoNow() - p.due)})
	}
}

// SetShape changes the delay, jitter and loss for packets from now on.
func (l *Link) SetShape(s Shape) { l.shape.Store(&s) }

// Cut blackholes the link both ways: every packet is dropped (packets
// already on the wire still arrive), as a partition that sends no
// resets. Connections across it stay open until their own timeouts.
func (l *Link) Cut() { l.cut.Store(true) }

// Restore ends a Cut.
func (l *Link) Restore() { l.cut.Store(false) }

// Down sets both ends' interfaces down, as a pulled cable: routes across
// the link disappear and sends to the peer fail until Up.
func (l *Link) Down() error {
	if err := l.a.ip("link", "set", "dev", l.devA, "down"); err != nil {
		return err
	}
	return l.b.ip("link", "set", "dev", l.devB, "down")
}

// Up brings both interfaces back with their routes.
func (l *Link) Up() error {
	for _, side := range []struct {
		ns, peer *Namespace
		dev      string
	}{{l.a, l.b, l.devA}, {l.b, l.a, l.devB}} {
		if err := side.ns.ip("link", "set", "dev", side.dev, "up"); err != nil {
			return err
		}
		// Down removed the route; add it back (idempotent with replace).
		if err := side.ns.ip("route", "replace", side.peer.IP.String()+"/32", "dev", side.dev, "src", side.ns.IP.String()); err != nil {
			return err
		}
	}
	return nil
}

// Stats returns the packet counters.
func (l *Link) Stats() Stats {
	return Stats{Forwarded: l.forwarded.Load(), Dropped: l.dropped.Load()}
}

// Close stops the pumps and closes the TUN devices (which removes them).
// Idempotent.
func (l *Link) Close() error {
	l.closeOnce.Do(func() {
		close(l.stop)
		_ = l.fa.Close()
		_ = l.fb.Close()
		l.wg.Wait()
	})
	return nil
}
