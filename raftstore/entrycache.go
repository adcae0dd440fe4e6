package raftstore

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// Encoding each log entry once for every follower. raft's NetworkTransport
// msgpack-encodes the whole AppendEntries request per follower, so with 6
// followers the leader encodes every entry 6 times; with non-voters that
// was half of raft's send path on the leader (DESIGN.md). entryCache keeps
// the encoding of recent entries, keyed by index, and appendSender
// (appendsend.go) writes the cached bytes into each request. The bytes on
// the wire are the very bytes raft's encoder writes for the same request
// (TestAppendWire_SameBytesAsRaft), so old and new servers mix freely.

// Entry cache bounds: the most recent entryCacheSlots entries (slot =
// index modulo the count), each at most entryCacheMaxBytes encoded;
// larger ones are encoded per request, as raft does. Worst case 8 MiB,
// typically a few hundred KiB (commands are small). 2,048 entries cover
// a non-voter's paced batch and a voter's latest RPC at several thousand
// writes per second; a follower catching up from further back misses and
// costs what it did before.
const (
	entryCacheSlots    = 2048
	entryCacheMaxBytes = 4 << 10
)

// entryCache holds the msgpack encoding of recent log entries.
type entryCache struct {
	handle *codec.MsgpackHandle
	seed   maphash.Seed
	misses atomic.Uint64 // entries encoded, not found

	mu    sync.Mutex
	slots [entryCacheSlots]cachedEntry
}

// cachedEntry is one encoded entry and what identifies it. Index and term
// alone identify an entry in raft (no two logs hold different entries at
// the same index and term); type, time and a hash of the payload are
// checked too, so a cache hit can only ever return the bytes of the very
// same entry.
type cachedEntry struct {
	index, term uint64
	typ         raft.LogType
	appendedAt  int64  // UnixNano
	sum         uint64 // maphash of Data and Extensions
	enc         []byte // never modified once stored
}

// newEntryCache returns an empty cache encoding with raft's settings for
// entries (newTimeFormat: NetworkTransportConfig.MsgpackUseNewTimeFormat).
func newEntryCache(newTimeFormat bool) *entryCache {
	return &entryCache{handle: raftMsgpackHandle(newTimeFormat), seed: maphash.MakeSeed()}
}

// raftMsgpackHandle is the handle raft's NetworkTransport encodes with.
func raftMsgpackHandle(newTimeFormat bool) *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{}
	h.TimeNotBuiltin = !newTimeFormat
	return h
}

// writeEntries writes entries to w as raft's encoder writes an
// []*raft.Log: a msgpack array header, then each entry, from the cache or
// encoded now (and then cached). scratch is the caller's buffer for
// encoding misses; the grown buffer is returned for reuse.
func (c *entryCache) writeEntries(w *bufio.Writer, entries []*raft.Log, scratch []byte) ([]byte, error) {
	if entries == nil {
		return scratch, w.WriteByte(0xc0) // msgpack nil, as for raft's nil slice
	}
	writeArrayHeader(w, len(entries))
	var enc *codec.Encoder
	for _, e := range entries {
		k := c.key(e)
		slot := &c.slots[k.index%entryCacheSlots]
		c.mu.Lock()
		hit := slot.enc
		if hit != nil && !slot.same(&k) {
			hit = nil
		}
		c.mu.Unlock()
		if hit != nil {
			_, _ = w.Write(hit)
			continue
		}
		c.misses.Add(1)
		scratch = scratch[:0]
		if enc == nil {
			enc = codec.NewEncoderBytes(&scratch, c.handle)
		} else {
			enc.ResetBytes(&scratch)
		}
		if err := enc.Encode(e); err != nil {
			return scratch, fmt.Errorf("encode log entry %d: %w", e.Index, err)
		}
		_, _ = w.Write(scratch)
		if len(scratch) <= entryCacheMaxBytes {
			k.enc = bytes.Clone(scratch)
			c.mu.Lock()
			*slot = k
			c.mu.Unlock()
		}
	}
	// bufio.Writer keeps its first error and returns it from Flush.
	return scratch, nil
}

// writeArrayHeader writes a msgpack array header for n elements, in the
// smallest form, as the encoder does.
func writeArrayHeader(w *bufio.Writer, n int) {
	switch {
	case n < 16:
		_ = w.WriteByte(0x90 | byte(n))
	case n <= math.MaxUint16:
		_ = w.WriteByte(0xdc)
		_, _ = w.Write(binary.BigEndian.AppendUint16(nil, uint16(n)))
	default:
		_ = w.WriteByte(0xdd)
		_, _ = w.Write(binary.BigEndian.AppendUint32(nil, uint32(n)))
	}
}

// key returns what identifies e, without its encoding.
func (c *entryCache) key(e *raft.Log) cachedEntry {
	var h maphash.Hash
	h.SetSeed(c.seed)
	// Data's length first, so that moving bytes between Data and
	// Extensions changes the sum.
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(e.Data)))
	_, _ = h.Write(n[:])
	_, _ = h.Write(e.Data)
	_, _ = h.Write(e.Extensions)
	return cachedEntry{index: e.Index, term: e.Term, typ: e.Type, appendedAt: e.AppendedAt.UnixNano(), sum: h.Sum64()}
}

func (s *cachedEntry) same(k *cachedEntry) bool {
	return s.index == k.index && s.term == k.term && s.typ == k.typ && s.appendedAt == k.appendedAt && s.sum == k.sum
}
