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
// operations done so far, the rate over the last second and the errors.
type progress struct {
	stopCh chan struct{}
	wg     sync.WaitGroup
}

// startProgress starts the printer; w == nil prints nothing.
func startProgress(w io.Writer, what string, c *counters) *progress {
	p := &progress{stopCh: make(chan struct{})}
	if w == nil {
		return p
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		start := time.Now()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		var last int64
		for {
			select {
			case <-p.stopCh:
				return
			case now := <-tick.C:
				n := c.done.Load()
				fmt.Fprintf(w, "%s %5.0fs  total %d  %d/s  errors %d\n",
					what, now.Sub(start).Seconds(), n, n-last, c.errors.Load())
				last = n
			}
		}
	}()
	return p
}

func (p *progress) stop() {
	close(p.stopCh)
	p.wg.Wait()
}
