// Package wannet puts the systems of a process-level test in their own
// Linux network namespaces and joins them by emulated WAN links: a fixed
// delay each way, jitter and packet loss, with verbs to cut a link
// (blackhole, or interface down) and restore it.
//
// A Namespace is made with `ip netns add` and holds one address (on its
// loopback device) that every process inside binds; the test reaches
// those processes through DialContext, Listen and Forward, which open
// their sockets on an OS thread switched into the namespace (setns) and
// back, so the test process itself stays in the host namespace. A
// Link joins two namespaces with a TUN device in each; the test process
// moves IP packets between the two devices, holding each for the link's
// delay (plus jitter, never reordering; to the microsecond, clock.go) and
// dropping the configured fraction, and records what it delivered when
// asked (StartRecording), so benchmarks can tell wire time from the
// endpoints' own. It plays the part of `tc qdisc ... netem delay 25ms 2ms loss
// 1%` on a veth pair: the kernel this project's CI runs on is built
// without sch_netem (CONFIG_NET_SCH_NETEM is not set), while TUN, veth and
// namespaces are there. The kernels' TCP stacks on both sides are real;
// only the wire is emulated.
//
// Everything it makes is removed by Close; a namespace left behind by a
// test binary that was killed is removed by the next NewNamespace (its
// name carries the creating process id).
//
// It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), the `ip` command
// (iproute2) and /dev/net/tun; Available says which is missing, so tests
// can skip naming the reason. Linux only.
//
// Who calls it: package clustertest's process harness (StartWAN) and the
// federation WAN tests and benchmarks.
package wannet
