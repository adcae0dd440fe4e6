package runs

import (
	"bytes"

	"github.com/concordmap/concord/consensus"
)

// catalogKey identifies a claim catalog slice. The engine shares one
// catalog slice between every task of a round (and later rounds while the
// catalog is unchanged) and never modifies it, so identity means equal
// contents. The cache keeps the slice itself beside its JSON: while an
// entry exists its array cannot be freed and its address reused by
// another catalog.
type catalogKey struct {
	first *consensus.Claim
	n     int
}

type cachedCatalog struct {
	claims []consensus.Claim // keeps first alive
	json   []byte
}

// taskEncoder renders tasks as consensus.Task.MarshalJSON does, encoding
// each shared claim catalog once instead of once per task: with a 500-claim
// catalog that is most of a task's bytes, and every participant of a round
// gets the same catalog. Only the driver loop uses it.
type taskEncoder struct {
	catalogs map[catalogKey]cachedCatalog
}

// cacheLimit bounds the catalogs kept (a few per concurrent run suffice).
const cacheLimit = 64

var nullCatalog = []byte(`"claimCatalog":null`)

func (c *taskEncoder) encode(t *consensus.Task) (taskJSON, error) {
	if t.Kind != consensus.TaskRound || len(t.ClaimCatalog) == 0 {
		b, err := t.MarshalJSON()
		return taskJSON{head: b}, err
	}
	key := catalogKey{first: &t.ClaimCatalog[0], n: len(t.ClaimCatalog)}
	cached, ok := c.catalogs[key]
	cat := cached.json
	if !ok {
		cat = consensus.AppendClaimsJSON(make([]byte, 0, 192*len(t.ClaimCatalog)), t.ClaimCatalog)
		if c.catalogs == nil || len(c.catalogs) >= cacheLimit {
			c.catalogs = map[catalogKey]cachedCatalog{}
		}
		c.catalogs[key] = cachedCatalog{claims: t.ClaimCatalog, json: cat}
	}
	bare := *t
	bare.ClaimCatalog = nil
	b, err := bare.MarshalJSON()
	if err != nil {
		return taskJSON{}, err
	}
	// The first `"claimCatalog":null` is the field itself: keys before it
	// cannot be spelled that way and string contents have escaped quotes.
	i := bytes.Index(b, nullCatalog)
	if i < 0 {
		b, err := t.MarshalJSON()
		return taskJSON{head: b}, err
	}
	return taskJSON{head: b[:i+len(`"claimCatalog":`)], catalog: cat, tail: b[i+len(nullCatalog):]}, nil
}

// taskJSON is a task's JSON in up to three parts (head, shared catalog,
// tail), concatenated only into the message that carries it, so the
// catalog is copied once per send.
type taskJSON struct {
	head, catalog, tail []byte
}

func (j taskJSON) len() int { return len(j.head) + len(j.catalog) + len(j.tail) }

func (j taskJSON) appendTo(b []byte) []byte {
	b = append(b, j.head...)
	b = append(b, j.catalog...)
	return append(b, j.tail...)
}
