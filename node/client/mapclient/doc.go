// Package mapclient is a small Go MAP (Multi-Agent Protocol) client built on
// node/rpc: it connects to one of a list of server URLs, resumes its session
// with the resume token after a connection loss (failing over to the next URL
// with backoff), registers agents, sends messages, subscribes to events and
// calls extension methods. `concord argue` and `concord agent` use it.
//
// # Connection and failover
//
// Dial tries the URLs in order until map/connect succeeds. A background
// supervisor goroutine (owned by the Client, stopped by Close) watches the
// connection; when it drops, the supervisor tries the next URL first (the
// node that dropped us is the likeliest to be gone), then the others in
// order, with no pause between URLs of one pass and an exponential backoff
// with jitter between passes (Config.MinBackoff..MaxBackoff). It gives up
// after Config.ReconnectTimeout; Done is then closed and Err says why.
//
// Every reconnect sends the session's resumeToken (and sessionId), so the
// server resumes the same session: agents stay registered (agents connect
// with a grace-period disconnect policy by default) and the server restores
// the session's subscriptions under their old ids, so Subscription handlers
// keep receiving events. When the server starts a fresh session instead
// (reconnected:false: the session expired or is unknown there), the client
// registers its agents again and re-subscribes every Subscription (new ids,
// same handlers). Agents the resumed session no longer owns are registered
// again too. Config.OnReconnect tells the application, so it can catch up
// on what it may have missed (argue re-reads the run).
//
// # Calls during a reconnect
//
// Call waits (bounded by its context) while the client is reconnecting. A
// call whose connection drops while it is in flight fails with
// ErrConnectionLost: the request may or may not have reached the server, so
// only the caller knows whether repeating it is safe. CallRetry repeats such
// calls and is meant for idempotent reads.
//
// # Handlers
//
// map/message and map/event notifications are handed to Config.OnMessage and
// to the Subscription handlers on the connection's reader goroutine, in
// arrival order. Handlers must return quickly and must not call the Client
// synchronously (the reply could never be read); hand work to another
// goroutine. Events that arrive for a subscription id before map/subscribe
// has returned it are held back (bounded) and delivered once it is known.
package mapclient
