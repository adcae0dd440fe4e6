// Package console is the web console every node serves at /ui/: a few
// static files (HTML, CSS and plain ES modules, no build step) embedded in
// the binary. It holds no server logic: the page speaks MAP over the
// node's own /map WebSocket as a client participant (agents, scopes,
// events, x-concord/runs/*) and reads the node's /v1 HTTP API (status,
// members, raft peers, run files), so everything it shows is available to
// any other MAP client or script.
//
// When the node it was opened on stops answering, the page reconnects to
// another member (it learns their HTTP addresses from /v1/members) and
// resumes its MAP session with sessionId and resumeToken; its /v1 reads
// then go to that member, which allows them through a CORS allowance for
// member origins (node.Server.allowMemberOrigins).
//
// node.Server mounts Handler at /ui/. Browser tests of the pages live in
// cluster-test (console_test.go), against a real 3-node cluster; the MAP
// client's failover and resume and the run view's model also have
// JavaScript unit tests (jstest/, run by TestJS with node --test).
package console
