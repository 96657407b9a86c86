package local

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/atelier-ml/atelier/internal/platform/fsperm"
)

// DefaultStepUID is the uid (and gid) steps run as when the worker runs as
// root and no step user is configured: the "nonroot" id of distroless
// images, which owns nothing on a typical machine. It needs no passwd entry.
const DefaultStepUID = 65532

// StepUser is the identity a step's process runs as. A zero StepUser (nil
// pointer in Runner) means the worker's own identity.
type StepUser struct {
	UID, GID uint32
	// Name is what logs and errors call it.
	Name string
}

// ParseStepUser resolves the --step-user setting for a worker whose
// effective uid is euid:
//
//   - "" (default): DefaultStepUID when the worker is root, else the
//     worker's own user (an unprivileged worker cannot switch users);
//   - "worker": the worker's own user, explicitly (with a root worker this
//     gives steps root: only for trusted pipelines);
//   - a user name, "uid" or "uid:gid": that identity; needs a root worker.
func ParseStepUser(s string, euid int) (*StepUser, error) {
	switch s {
	case "":
		if euid != 0 {
			return nil, nil
		}
		return &StepUser{UID: DefaultStepUID, GID: DefaultStepUID, Name: strconv.Itoa(DefaultStepUID)}, nil
	case "worker":
		return nil, nil
	}
	if euid != 0 {
		return nil, fmt.Errorf("step user %q: the worker must run as root to run steps as another user (it runs as uid %d); leave the step user unset to run steps as the worker's user", s, euid)
	}
	uidStr, gidStr, hasGID := strings.Cut(s, ":")
	if uid, err := strconv.ParseUint(uidStr, 10, 32); err == nil {
		gid := uid
		if hasGID {
			if gid, err = strconv.ParseUint(gidStr, 10, 32); err != nil {
				return nil, fmt.Errorf("step user %q: gid %q is not a number", s, gidStr)
			}
		}
		if uid == 0 {
			return nil, fmt.Errorf("step user %q: steps must not run as root; use \"worker\" to run them as the worker's user on purpose", s)
		}
		return &StepUser{UID: uint32(uid), GID: uint32(gid), Name: s}, nil
	}
	if hasGID {
		return nil, fmt.Errorf("step user %q: use a user name, uid or uid:gid", s)
	}
	u, err := user.Lookup(s)
	if err != nil {
		return nil, fmt.Errorf("step user %q: %w", s, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("step user %q: non-numeric uid/gid %q/%q", s, u.Uid, u.Gid)
	}
	if uid == 0 {
		return nil, fmt.Errorf("step user %q is root; use \"worker\" to run steps as the worker's user on purpose", s)
	}
	return &StepUser{UID: uint32(uid), GID: uint32(gid), Name: s}, nil
}

// WithStepUser runs every step as u (nil: the worker's own user). The
// worker must be root to switch users.
func WithStepUser(u *StepUser) Option { return func(r *Runner) { r.stepUser = u } }

// giveTo hands a directory the step must write (its work dir, the outputs
// dir) to the step user; a no-op without one.
func (r *Runner) giveTo(dir string) error {
	if r.stepUser == nil {
		return nil
	}
	if err := os.Chown(dir, int(r.stepUser.UID), int(r.stepUser.GID)); err != nil {
		return fmt.Errorf("give %s to step user %s: %w", dir, r.stepUser.Name, err)
	}
	return nil
}

// CheckDataDir fails when the step user cannot reach the data dir, where
// every step's work and outputs directories live: better a clear error when
// the worker starts than every step failing with "permission denied".
func (r *Runner) CheckDataDir() error {
	if r.stepUser == nil {
		return nil
	}
	if err := fsperm.Reachable(r.dataDir, r.stepUser.UID, r.stepUser.GID); err != nil {
		return fmt.Errorf("steps run as uid %d but cannot reach the data dir %s: %w (choose another --data-dir, or make that directory searchable: chmod o+x)", r.stepUser.UID, r.dataDir, err)
	}
	return nil
}
