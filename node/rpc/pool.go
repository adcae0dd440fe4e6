package rpc

import "sync"

// syncBufferPool adapts sync.Pool to websocket.BufferPool.
type syncBufferPool struct{ p sync.Pool }

func newSyncBufferPool() *syncBufferPool { return &syncBufferPool{} }

func (b *syncBufferPool) Get() any  { return b.p.Get() }
func (b *syncBufferPool) Put(v any) { b.p.Put(v) }
