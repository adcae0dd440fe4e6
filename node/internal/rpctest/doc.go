// Package rpctest holds in-process node/rpc test doubles shared by the
// tests of node packages that deliver over live rpc connections (router,
// fanout): a session table that clients attach to, and a client-side inbox
// for one notification method.
//
// It is imported only from _test.go files; it lives under internal so the
// doubles never become API, and outside those packages so they can share it
// without exporting test code from production packages.
package rpctest
