// Package tlstest hands tests TLS material from a throwaway CA per system
// id, generated once per test binary and kept in memory, so clusters in
// tests run with TLS on at the cost of a few key generations.
//
// It is for tests only (node tests, cluster-test, cmd tests); production
// code never imports it.
package tlstest
