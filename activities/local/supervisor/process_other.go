//go:build !unix

package supervisor

import (
	"errors"
	"os"
	"time"
)

var errUnsupported = errors.New("step supervisors need a Unix system")

// Start fails: the local runtime runs steps only on Unix systems.
func Start(string, Spec, *os.File) (*Process, error) { return nil, errUnsupported }

// Adopt returns a process that is already lost.
func Adopt(dir string, st Started, _ time.Duration) *Process {
	p := &Process{Started: st, dir: dir, done: make(chan struct{}), err: ErrLost}
	close(p.done)
	return p
}

// Alive is false: nothing is supervised here.
func Alive(string, Started) bool { return false }
