package clustertest

import (
	"testing"
	"time"
)

// TestLinearizability_RegistryUnderFaults runs four clients (two on the
// first node, one on each other) over three agent ids while the leader is
// first partitioned away and healed, then killed and restarted; the
// register/unregister/get history must be linearizable.
func TestLinearizability_RegistryUnderFaults(t *testing.T) {
	c := New(t, 3)
	w := newLinWorkload(c, 3)
	stop := w.run(t, []int{0, 0, 1, 2})
	phase := func(d time.Duration) { time.Sleep(d) } // the workload runs meanwhile

	phase(time.Second)
	l := c.Leader(t)
	t.Logf("partition: %s alone", l)
	c.Net.Partition(idsOf([]*Node{l}), idsOf(others(c.Running(), l)))
	phase(1500 * time.Millisecond)
	c.Net.Heal()
	phase(time.Second)

	l = c.Leader(t)
	t.Logf("kill leader %s", l)
	c.Kill(t, l.Index)
	phase(1500 * time.Millisecond)
	c.Restart(t, l.Index)
	phase(time.Second)

	stop()
	w.check(t)
	c.RequireInvariants(t)
}
