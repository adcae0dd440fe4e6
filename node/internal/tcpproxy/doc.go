// Package tcpproxy is a TCP forwarder for tests: it sits in front of a
// node's port so a test can cut every connection through it while the
// node stays up (a broken client path, a broken stream between nodes).
//
// It is imported only from _test.go files; it lives under internal so it
// never becomes API, and outside the packages that use it so they share
// one copy.
package tcpproxy
