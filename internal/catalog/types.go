package catalog

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/atelier-ml/atelier/workflows"
)

// Sentinel errors returned by every catalogue implementation. Callers use
// errors.Is; no driver error type ever leaves the store.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
	// ErrInvalidArgument marks a caller mistake the store detects, such as
	// a malformed or foreign page token; the gateway answers 400.
	ErrInvalidArgument = errors.New("invalid argument")
)

// Role grants what a token may do. Admin tokens are not bound to a project.
type Role string

// Roles, from most to least privileged.
const (
	RoleAdmin  Role = "admin"  // every project; manage projects and tokens
	RoleEditor Role = "editor" // one project: create pipelines, start and cancel runs
	RoleViewer Role = "viewer" // one project: read only
)

// Project is the tenant boundary.
type Project struct {
	Name        string    `json:"name"`
	Description string    `json:"description,omitempty"`
	CreatedAt   time.Time `json:"createdAt"`
}

// Token is an API token. Only the SHA-256 of the secret is stored.
type Token struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Project   string     `json:"project,omitempty"` // empty for admin tokens
	Role      Role       `json:"role"`
	CreatedAt time.Time  `json:"createdAt"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// PipelineVersion is one immutable version of a declarative pipeline.
type PipelineVersion struct {
	Project   string          `json:"project"`
	Pipeline  string          `json:"pipeline"`
	Version   int             `json:"version"`
	Spec      json.RawMessage `json:"spec"`   // canonical JSON of spec.Pipeline
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

// Run is the Postgres index entry of a run: the row the gateway writes at
// start, kept current by the workflow's mirror activity.
type Run struct {
	ID             string               `json:"id"`
	Project        string               `json:"project"`
	Pipeline       string               `json:"pipeline,omitempty"`
	Version        int                  `json:"version,omitempty"`
	Workflow       string               `json:"workflow"`
	State          workflows.RunState   `json:"state"`
	CreatedAt      time.Time            `json:"createdAt"`
	UpdatedAt      time.Time            `json:"updatedAt"`
	CreatedBy      string               `json:"createdBy,omitempty"`
	IdempotencyKey string               `json:"-"`
	RequestHash    string               `json:"-"`                // sha256 of the start request, to detect key reuse
	Input          json.RawMessage      `json:"-"`                // the workflow input, to (re)start idempotently
	Status         *workflows.RunStatus `json:"status,omitempty"` // last mirrored status
}

// RunFilter selects runs of one project. Zero values mean "any".
type RunFilter struct {
	Project       string
	Pipeline      string
	State         workflows.RunState
	CreatedAfter  *time.Time
	CreatedBefore *time.Time
	Limit         int    // 1..500, default 50
	PageToken     string // opaque keyset cursor from a previous page
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
