//go:build !linux

package kubetest

import (
	"context"
	"fmt"
	"time"
)

// The real node runs on Linux only; these stubs keep the package compiling
// elsewhere, where RealNode skips (or fails under ATELIER_REQUIRE_NODE=1).

func nodePrerequisites() []string { return []string{"Linux"} }

func lockNode(context.Context, func(string, ...any)) (func(), error) {
	return nil, fmt.Errorf("%w: needs Linux", ErrNodeUnavailable)
}

func saveHostState() error { return fmt.Errorf("%w: needs Linux", ErrNodeUnavailable) }

func prepareHost() error { return fmt.Errorf("%w: needs Linux", ErrNodeUnavailable) }

func sweepNode(func(string, ...any)) error { return nil }

// SweepRealNode has nothing to do off Linux.
func SweepRealNode(time.Duration, func(string, ...any)) error { return nil }

// RealNodeTraces finds nothing off Linux.
func RealNodeTraces() []string { return nil }

// WatchedSysctls is empty off Linux.
func WatchedSysctls() map[string]string { return nil }
