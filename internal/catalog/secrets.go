package catalog

import "time"

// Secret is what the catalogue shows of a project's secret: its name and
// history, never its value (which is stored only sealed, and opened only
// where a step that references it runs).
type Secret struct {
	Project   string
	Name      string
	Version   int // 1 when created, +1 on every replacement
	CreatedAt time.Time
	UpdatedAt time.Time
	UpdatedBy string // the token that last wrote it
}

// SecretEvent is one line of a project's secrets audit.
type SecretEvent struct {
	Name   string
	Action string // created, replaced, deleted, rewrapped
	Actor  string
	At     time.Time
}

// Secret audit actions.
const (
	SecretCreated   = "created"
	SecretReplaced  = "replaced"
	SecretDeleted   = "deleted"
	SecretRewrapped = "rewrapped"
)

// MaxSecretValue bounds a secret's value (it travels in a process's
// environment).
const MaxSecretValue = 64 << 10
