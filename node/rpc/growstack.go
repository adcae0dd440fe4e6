package rpc

// firstMessageStack is the stack a WebSocket's handler goroutine is grown
// to fit before the handshake: the upgrade, then the first message
// (map/connect through mapsvc, the Raft forward and its gRPC send) go
// about 16 KiB deep below net/http's frames.
const firstMessageStack = 20 << 10

// growStack grows the calling goroutine's stack, while its frames are
// still few, so that firstMessageStack more bytes fit. A goroutine starts
// with a 2 KiB stack and doubles it whenever a call does not fit, copying
// every frame each time; net/http's connection goroutine used to double
// three or four times on its way through the handshake and map/connect,
// the last times from deep inside (7-8% of a follower's CPU under a burst
// of connects, issue 10). One large frame at the top makes the runtime
// size the stack once, copying only net/http's frames. The goroutine
// returns after the first message (the reader hops to a small one), so
// the larger stack is freed, not kept by an idle session.
//
//go:noinline
func growStack() {
	var buf [firstMessageStack]byte
	touchStack(buf[:])
}

// touchStack keeps growStack's array (and so its frame) from being
// optimised away; it does not retain b, which therefore stays on the
// stack.
//
//go:noinline
func touchStack(b []byte) {
	if len(b) == 0 {
		panic("rpc: empty stack buffer")
	}
}
