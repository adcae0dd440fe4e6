package benchload

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// counters are what a load's workers report while it runs.
type counters struct {
	done   atomic.Int64 // operations completed (writes, messages received, sessions connected)
	errors atomic.Int64
}

// progress prints one line a second to w until stop is called: the
// operations done so far, the rate since the previous line and the errors.
type progress struct {
	stopCh chan struct{}
	wg     sync.WaitGroup
}

// startProgress starts the printer; w == nil prints nothing.
func startProgress(w io.Writer, what string, c *counters) *progress {
	// The start is taken here, not on the goroutine, which a loaded
	// machine may start late: the seconds are the run's.
	return startProgressSince(w, what, c, time.Now())
}

// startProgressSince is startProgress for a run that began at start.
func startProgressSince(w io.Writer, what string, c *counters, start time.Time) *progress {
	p := &progress{stopCh: make(chan struct{})}
	if w == nil {
		return p
	}
	tick := time.NewTicker(time.Second)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer tick.Stop()
		var last int64
		lines := 0
		line := func(now time.Time) {
			n := c.done.Load()
			fmt.Fprintf(w, "%s %5.0fs  total %d  %d/s  errors %d\n",
				what, now.Sub(start).Seconds(), n, n-last, c.errors.Load())
			last = n
			lines++
		}
		for {
			select {
			case <-p.stopCh:
				// A line that fell due before the stop is still printed:
				// on a loaded machine this goroutine may not have run
				// since its tick, and select picks at random between a
				// pending tick and the stop. A run of at least a second
				// always shows a line.
				if now := time.Now(); now.Sub(start) >= time.Duration(lines+1)*time.Second {
					line(now)
				}
				return
			case now := <-tick.C:
				line(now)
			}
		}
	}()
	return p
}

func (p *progress) stop() {
	close(p.stopCh)
	p.wg.Wait()
}
