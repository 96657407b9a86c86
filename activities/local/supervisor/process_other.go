//go:build !unix

package supervisor

import (
	"errors"
	"time"
)

var errUnsupported = errors.New("step supervisors need a Unix system")

// Pool cannot start anything here.
type Pool struct{}

// Start fails: the local runtime runs steps only on Unix systems.
func (*Pool) Start(string, Spec) (*Process, error) { return nil, errUnsupported }

// Adopt returns a process that is already lost.
func Adopt(dir string, st Started, _ time.Duration) *Process {
	p := &Process{Started: st, dir: dir, done: make(chan struct{}), err: ErrLost}
	close(p.done)
	return p
}

// Alive is false: nothing is supervised here.
func Alive(Started) bool { return false }
