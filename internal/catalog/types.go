package catalog

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"time"

	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
	"github.com/atelier-ml/atelier/runstate"
)

// Sentinel errors returned by every catalogue implementation. Callers use
// errors.Is; no driver error type ever leaves the store.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
	// ErrInvalidArgument marks a caller mistake the store detects, such as
	// a malformed or foreign page token; the gateway answers 400.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrUnavailable means the catalogue's database cannot be reached right
	// now (down, restarting, network); the gateway answers 503 with
	// Retry-After, and the operation may be retried as is.
	ErrUnavailable = errors.New("catalogue unavailable")
	// ErrNotLatest: CreateRunIfLatest found that the run's pipeline
	// version is no longer the pipeline's newest; nothing was written.
	ErrNotLatest = errors.New("not the newest pipeline version")
)

// Project is the tenant boundary.
type Project struct {
	Name        string    `json:"name"`
	Description string    `json:"description,omitempty"`
	CreatedAt   time.Time `json:"createdAt"`
}

// Token is an API token. Only the SHA-256 of the secret is stored.
type Token struct {
	ID        string      `json:"id"`
	Name      string      `json:"name"`
	Project   string      `json:"project,omitempty"` // empty for admin tokens
	Role      tokens.Role `json:"role"`
	CreatedAt time.Time   `json:"createdAt"`
	ExpiresAt *time.Time  `json:"expiresAt,omitempty"`
}

// PipelineVersion is one immutable version of a declarative pipeline.
type PipelineVersion struct {
	Project   string          `json:"project"`
	Pipeline  string          `json:"pipeline"`
	Version   int             `json:"version"`
	Spec      json.RawMessage `json:"spec"`   // canonical JSON of pipeline.Spec
	Digest    string          `json:"digest"` // sha256 of Spec
	CreatedAt time.Time       `json:"createdAt"`
	CreatedBy string          `json:"createdBy,omitempty"`
}

// Pipeline summarises a pipeline and its newest version.
type Pipeline struct {
	Project       string    `json:"project"`
	Name          string    `json:"name"`
	LatestVersion int       `json:"latestVersion"`
	CreatedAt     time.Time `json:"createdAt"`
	UpdatedAt     time.Time `json:"updatedAt"`
}

// GoWorkflow is a native Go pipeline that some worker has registered.
type GoWorkflow struct {
	Name        string    `json:"name"`
	Description string    `json:"description,omitempty"`
	TaskQueue   string    `json:"taskQueue"`
	UpdatedAt   time.Time `json:"updatedAt"`
}

// RunKey locates a run in the order of ListUnfinishedRuns (the zero key
// is before every run).
type RunKey struct {
	UpdatedAt time.Time
	ID        string
}

// Run is the Postgres index entry of a run: the row the gateway writes at
// start, kept current by the workflow's mirror activity.
type Run struct {
	ID             string           `json:"id"`
	Project        string           `json:"project"`
	Pipeline       string           `json:"pipeline,omitempty"`
	Version        int              `json:"version,omitempty"`
	Workflow       string           `json:"workflow"`
	State          runstate.State   `json:"state"`
	CreatedAt      time.Time        `json:"createdAt"`
	UpdatedAt      time.Time        `json:"updatedAt"`
	CreatedBy      string           `json:"createdBy,omitempty"`
	IdempotencyKey string           `json:"-"`
	RequestHash    string           `json:"-"`                // sha256 of the start request, to detect key reuse
	Input          json.RawMessage  `json:"-"`                // the workflow input, to (re)start idempotently
	Status         *runstate.Status `json:"status,omitempty"` // last mirrored status
	// MetricValue is the run's value of RunFilter.ByMetric (listed so).
	MetricValue *float64 `json:"-"`
}

// RunFilter selects runs of one project. Zero values mean "any".
type RunFilter struct {
	Project       string
	Pipeline      string
	State         runstate.State
	CreatedBy     string // the name of the token that started the run through REST
	Schedule      string // the name of the schedule that started the run
	CreatedAfter  *time.Time
	CreatedBefore *time.Time
	Limit         int    // 1..500, default 50
	PageToken     string // opaque keyset cursor from a previous page
	// ByMetric lists, instead of newest first, the runs of Pipeline whose
	// step reported a scalar metric, by its value (with State only).
	ByMetric *MetricOrder
}

// MetricOrder orders runs by a step's scalar metric: highest first unless
// Ascending, ties newest first; Min and Max (inclusive) bound the value.
type MetricOrder struct {
	Step, Name string
	Ascending  bool
	Min, Max   *float64
}

// RunPage is one page of runs, newest first.
type RunPage struct {
	Runs          []Run
	NextPageToken string // empty on the last page
}

// LogChunk is a piece of a step attempt's combined stdout/stderr.
type LogChunk struct {
	Offset int64 // byte offset of Data in the attempt's log
	Data   []byte
}

// ClusterOnlineWindow is how recently a cluster's worker must have reported
// for the cluster to count as online. Workers report every 30 s, so two
// minutes tolerates a few missed reports (a restart, a slow API server)
// without treating a dead worker as alive for long.
const ClusterOnlineWindow = 2 * time.Minute

// ClusterNamePattern is what a cluster name must match. Names become part of
// a Temporal task queue and of Kubernetes object labels, hence DNS-label
// rules.
const ClusterNamePattern = `^[a-z][a-z0-9-]{0,62}$`

var clusterNameRE = regexp.MustCompile(ClusterNamePattern)

// ValidClusterName reports whether name matches ClusterNamePattern.
func ValidClusterName(name string) bool { return clusterNameRE.MatchString(name) }

// Cluster labels follow Kubernetes label syntax, which operators already
// know and which keeps them usable as Kubernetes labels later.
var (
	labelNameRE   = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	labelPrefixRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// ClusterLabelProblem returns why key=value is not a valid cluster label,
// or "" when it is: the key is an optional DNS-subdomain prefix (at most
// 253 characters) and "/", then a name of at most 63 characters; the value
// is empty or such a name.
func ClusterLabelProblem(key, value string) string {
	name := key
	if prefix, rest, ok := strings.Cut(key, "/"); ok {
		if len(prefix) > 253 || !labelPrefixRE.MatchString(prefix) {
			return "the key's prefix must be a DNS subdomain such as example.com"
		}
		name = rest
	}
	if !labelNameRE.MatchString(name) {
		return "the key must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit (optionally after a prefix/)"
	}
	if value != "" && !labelNameRE.MatchString(value) {
		return "the value must be empty or at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
	}
	return ""
}

// Cluster is a Kubernetes cluster registered to run ray, spark and
// Kubernetes container steps. The worker serving it registers the cluster at
// start and then reports its capacity periodically; admins may also register
// it (to set labels) through the API.
type Cluster struct {
	Name        string            `json:"name"`
	Description string            `json:"description,omitempty"`
	Labels      map[string]string `json:"labels"`
	// TaskQueue is the queue the cluster's worker polls
	// (activities.TaskQueueForCluster(Name)).
	TaskQueue string    `json:"taskQueue"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	// LastSeenAt is the time of the worker's last capacity report; nil
	// until the first one.
	LastSeenAt *time.Time `json:"lastSeenAt,omitempty"`
	// Capacity is the last reported capacity; nil until the first report.
	Capacity *ClusterCapacity `json:"capacity,omitempty"`
}

// Online reports whether the cluster's worker reported within
// ClusterOnlineWindow of now.
func (c Cluster) Online(now time.Time) bool {
	return c.LastSeenAt != nil && now.Sub(*c.LastSeenAt) <= ClusterOnlineWindow
}

// GPUPolicy is a project's GPU admission policy (ProjectPolicy.Name is the
// project): cohort, fair-share weight, priority range and quotas per GPU
// product or MIG profile. A project without one has no GPU quota.
type GPUPolicy struct {
	gpu.ProjectPolicy
	UpdatedAt time.Time
}

// ClusterCapacity is a snapshot of what a cluster's schedulable nodes offer:
// allocatable resources, and what is left after the requests of the pods
// bound to them.
type ClusterCapacity struct {
	// GPUs are nvidia.com/gpu by node label nvidia.com/gpu.product
	// ("unknown" for GPU nodes without the label).
	GPUs        map[string]ResourceAmount `json:"gpus"`
	CPUMillis   ResourceAmount            `json:"cpuMillis"`
	MemoryBytes ResourceAmount            `json:"memoryBytes"`
	// Nodes counts the nodes included (ready and schedulable).
	Nodes int `json:"nodes"`
	// GPUNodes is the GPU inventory node by node (ready or not), sorted by
	// name: what GPU admission decides on.
	GPUNodes []gpu.Node `json:"gpuNodes,omitempty"`
	// KueueQueue is the Kueue LocalQueue the cluster's worker submits Jobs
	// and RayJobs to (--kueue-queue): Kueue admits them, so Atelier's own
	// GPU admission skips them. "" means Atelier admits.
	KueueQueue string `json:"kueueQueue,omitempty"`
}

// FreeGPUs returns the free GPUs of one product, or of every product summed
// when product is empty.
func (c *ClusterCapacity) FreeGPUs(product string) int64 {
	if c == nil {
		return 0
	}
	if product != "" {
		return c.GPUs[product].Free
	}
	var n int64
	for _, a := range c.GPUs {
		n += a.Free
	}
	return n
}

// TotalGPUs is FreeGPUs for allocatable GPUs.
func (c *ClusterCapacity) TotalGPUs(product string) int64 {
	if c == nil {
		return 0
	}
	if product != "" {
		return c.GPUs[product].Total
	}
	var n int64
	for _, a := range c.GPUs {
		n += a.Total
	}
	return n
}

// ResourceAmount is a total (allocatable) and what is free of it.
type ResourceAmount struct {
	Total int64 `json:"total"`
	Free  int64 `json:"free"`
}

// CacheEntry is one step cache entry: the outputs of a successful step (or
// forEach item) execution under the hash of its rendered work, in one
// project (see workflows/cache.go). Item is nil when the step was not a
// forEach item.
type CacheEntry struct {
	Project  string         `json:"project"`
	Key      string         `json:"key"`
	Pipeline string         `json:"pipeline"`
	Step     string         `json:"step"`
	Item     *int           `json:"item,omitempty"`
	RunID    string         `json:"runId"`
	Attempt  int            `json:"attempt"`
	Outputs  map[string]any `json:"outputs"`
	// Artifacts are the step's output artifacts (references).
	Artifacts []runstate.Artifact `json:"artifacts,omitempty"`
	// Metrics are what the execution reported (nil: none).
	Metrics   *runstate.Metrics `json:"metrics,omitempty"`
	CreatedAt time.Time         `json:"createdAt"`
	ExpiresAt *time.Time        `json:"expiresAt,omitempty"`
}

// CacheFilter selects a project's live step cache entries (at Now);
// empty Pipeline and Step match any.
type CacheFilter struct {
	Project   string
	Pipeline  string
	Step      string
	Now       time.Time
	Limit     int
	PageToken string
}

// CachePage is one page of cache entries, newest first.
type CachePage struct {
	Entries       []CacheEntry
	NextPageToken string
}

// ItemPage is one page of a wide forEach step's items (step_items).
type ItemPage struct {
	Items []runstate.ItemRecord
	// NextPageToken continues the listing ("" on the last page).
	NextPageToken string
}

// StoredArtifact is an artifact as the catalogue records it: who wrote it
// (Producer), what it is, and when it was recorded.
type StoredArtifact struct {
	runstate.Artifact
	Project   string    `json:"project"`
	CreatedAt time.Time `json:"createdAt"`
}

// ArtifactImport is what an import of URI last stored in Project
// (Digest, Size, Files: a directory's file count) and the source's
// Fingerprint when it was read: an import that finds the same fingerprint
// and the bytes still stored reads nothing.
type ArtifactImport struct {
	Project     string
	URI         string
	Fingerprint string
	Digest      string
	Size        int64
	Files       int
}

// ArtifactUse is a step (or forEach item) of a run that read an artifact,
// under its input name.
type ArtifactUse struct {
	Run   string    `json:"run"`
	Step  string    `json:"step"`
	Item  *int      `json:"item,omitempty"`
	Input string    `json:"input"`
	At    time.Time `json:"at"`
}

// ConsumedArtifact is an artifact a run read, with how it read it.
type ConsumedArtifact struct {
	Use      ArtifactUse    `json:"use"`
	Artifact StoredArtifact `json:"artifact"`
}

// ArtifactLineage is one artifact with what it was made from (the inputs
// of the step that wrote it) and who read it.
type ArtifactLineage struct {
	Artifact StoredArtifact `json:"artifact"`
	// MadeFrom are the artifacts the producing step read, by input name.
	MadeFrom []ConsumedArtifact `json:"madeFrom"`
	// Consumers are the steps that read it, oldest first (at most
	// MaxArtifactConsumers).
	Consumers []ArtifactUse `json:"consumers"`
}

// MaxArtifactConsumers bounds the consumers one lineage answer lists.
const MaxArtifactConsumers = 1000

// Model is a project's registered model: a name whose versions are
// artifacts, with aliases naming some of them.
type Model struct {
	Project     string    `json:"project"`
	Name        string    `json:"name"`
	Description string    `json:"description"`
	Latest      int       `json:"latest"` // 0: no version yet
	CreatedAt   time.Time `json:"createdAt"`
	CreatedBy   string    `json:"createdBy"`
	// Aliases map an alias to the version it names.
	Aliases map[string]int `json:"aliases"`
}

// ModelVersion is an immutable version of a registered model: the
// artifact (digest, size, producer) it is.
type ModelVersion struct {
	Project  string            `json:"project"`
	Model    string            `json:"model"`
	Version  int               `json:"version"`
	Artifact runstate.Artifact `json:"artifact"`
	// Format is a serving hint (vllm, triton, ...).
	Format    string         `json:"format"`
	Metadata  map[string]any `json:"metadata"`
	CreatedAt time.Time      `json:"createdAt"`
	CreatedBy string         `json:"createdBy"`
	// Aliases are the aliases naming this version.
	Aliases []string `json:"aliases"`
}

// NewModelVersion registers an artifact as a version of a model (created
// with the version when it does not exist).
type NewModelVersion struct {
	Project  string
	Model    string
	Artifact runstate.Artifact
	Format   string
	Metadata map[string]any
	Actor    string
}

// ModelAliasEvent is one move of an alias: From is the version it named
// before (nil: it was new), To after (nil: it was removed).
type ModelAliasEvent struct {
	Alias string    `json:"alias"`
	From  *int      `json:"from,omitempty"`
	To    *int      `json:"to,omitempty"`
	Actor string    `json:"actor"`
	At    time.Time `json:"at"`
}
