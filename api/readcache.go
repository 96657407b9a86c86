// This file holds the gateway's read caches (tokens, pipeline versions),
// which spare Postgres round trips on hot paths; the step cache's REST API
// is stepcache.go.

package api

import (
	"sync"
	"time"

	"github.com/atelier-ml/atelier/internal/catalog"
)

// tokenCache keeps resolved bearer tokens for ttl, so that a start (or
// any request) does not pay a Postgres round trip for its token. The price
// is the revocation bound: a token revoked through another gateway, or in
// the database, keeps working on a gateway that cached it for up to ttl
// (revoking through this gateway forgets it here at once). Expiry is
// still checked on every request; unknown tokens are not cached, so a new
// token works at once and garbage cannot fill the cache.
type tokenCache struct {
	ttl time.Duration
	max int

	mu sync.Mutex
	m  map[string]cachedToken // by secret hash
}

type cachedToken struct {
	tok catalog.Token
	at  time.Time
}

func newTokenCache(ttl time.Duration, max int) *tokenCache {
	if ttl <= 0 {
		return nil
	}
	return &tokenCache{ttl: ttl, max: max, m: map[string]cachedToken{}}
}

func (c *tokenCache) get(hash []byte, now time.Time) (catalog.Token, bool) {
	if c == nil {
		return catalog.Token{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[string(hash)]
	if !ok || now.Sub(e.at) >= c.ttl || now.Before(e.at) {
		return catalog.Token{}, false
	}
	return e.tok, true
}

func (c *tokenCache) put(hash []byte, tok catalog.Token, now time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		for k, e := range c.m {
			if now.Sub(e.at) >= c.ttl {
				delete(c.m, k)
			}
		}
		if len(c.m) >= c.max {
			clear(c.m) // more live tokens than max within one ttl: start over
		}
	}
	c.m[string(hash)] = cachedToken{tok: tok, at: now}
}

// forget drops the token with this ID (revoked through this gateway).
func (c *tokenCache) forget(id string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		if e.tok.ID == id {
			delete(c.m, k)
		}
	}
}

// versionCache keeps pipeline versions, which are immutable once stored,
// by (project, pipeline, version): no expiry, bounded in number. It also
// remembers the newest version it saw per pipeline, but only as a guess:
// a run of "the newest version" is inserted with CreateRunIfLatest, which
// checks the guess in the same statement, so a version posted through any
// gateway is used by the very next start.
type versionCache struct {
	max int

	mu     sync.Mutex
	m      map[versionKey]catalog.PipelineVersion
	newest map[[2]string]int
}

type versionKey struct {
	project, pipeline string
	version           int
}

func newVersionCache(max int) *versionCache {
	return &versionCache{max: max, m: map[versionKey]catalog.PipelineVersion{}, newest: map[[2]string]int{}}
}

func (c *versionCache) latest(project, pipeline string) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.newest[[2]string{project, pipeline}]
	return n, ok
}

func (c *versionCache) setLatest(project, pipeline string, version int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.newest) >= c.max {
		clear(c.newest)
	}
	c.newest[[2]string{project, pipeline}] = version
}

func (c *versionCache) get(k versionKey) (catalog.PipelineVersion, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *versionCache) put(v catalog.PipelineVersion) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[versionKey{v.Project, v.Pipeline, v.Version}] = v
}
