package activities

import (
	"time"

	"github.com/atelier-ml/atelier/runstate"
)

// Step cache activities (package activities/stepcache). Pipelines run them
// as local activities, on the worker that runs the workflow task: a lookup
// before a cached step runs and a store after it succeeded, each a marker
// in history rather than a round trip through a task queue. Steps without
// caching never run them.
const (
	CacheLookupName = "atelier.cache.lookup"
	CacheStoreName  = "atelier.cache.store"
)

// CacheLookupRequest asks for a project's entry under Key.
type CacheLookupRequest struct {
	Project string `json:"project"`
	Key     string `json:"key"`
	// TTL bounds the age of an entry that may be reused (0: none), on
	// top of the expiry the entry was stored with.
	TTL time.Duration `json:"ttl,omitempty"`
}

// CacheLookupResult is a hit (Hit true: Source and Outputs) or a miss.
type CacheLookupResult struct {
	Hit     bool                 `json:"hit"`
	Source  runstate.CacheSource `json:"source"`
	Outputs map[string]any       `json:"outputs,omitempty"`
	// Artifacts are the source's output artifacts (references).
	Artifacts []runstate.Artifact `json:"artifacts,omitempty"`
	// Metrics are what the source reported (nil: none).
	Metrics *runstate.Metrics `json:"metrics,omitempty"`
}

// CacheStoreRequest stores the result of a successful execution under
// Key, replacing an older entry.
type CacheStoreRequest struct {
	Project  string `json:"project"`
	Key      string `json:"key"`
	Pipeline string `json:"pipeline"` // pipeline (or Go workflow) that stored it
	// Source names the run, step, item and attempt; its At is ignored
	// (the store's clock stamps the entry).
	Source  runstate.CacheSource `json:"source"`
	Outputs map[string]any       `json:"outputs,omitempty"`
	// Artifacts are the step's output artifacts (references: the bytes
	// stay in the artifact store, shared by every run that reuses them).
	Artifacts []runstate.Artifact `json:"artifacts,omitempty"`
	// Metrics are what the step reported (nil: none).
	Metrics *runstate.Metrics `json:"metrics,omitempty"`
	// TTL makes the entry expire (0: never).
	TTL time.Duration `json:"ttl,omitempty"`
}
