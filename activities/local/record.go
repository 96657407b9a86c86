package local

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"

	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/local/supervisor"
)

// A step's result is recorded in its attempt directory (result.json) the
// moment its process has ended and its outcome is known, before the
// activity reports it. When the report is lost (the worker or the Temporal
// server died in between) Temporal delivers the activity again, and the
// new execution returns the recorded result instead of running the
// command a second time (issue 29; docs/operations.md "Crash safety").

// recorded is what result.json holds.
type recorded struct {
	// Request is the SHA-256 of the request that ran: only a delivery of
	// the very same request gets the recorded result.
	Request string                     `json:"request"`
	Result  activities.ContainerResult `json:"result"`
	Error   *recordedError             `json:"error,omitempty"`
}

func requestDigest(req activities.ContainerRequest) string {
	b, _ := json.Marshal(req)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

type recordedError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// finalErrors are the outcomes of a process that ended by itself or was
// stopped for its timeout: the same whoever reports them. Other errors
// (a cancel, a worker that lost its child) are not recorded.
var finalErrors = []string{activities.ErrTypeStepFailed, activities.ErrTypeStepTimeout, activities.ErrTypeBadOutputs}

func (a *attempt) resultPath() string { return filepath.Join(a.attemptDir, "result.json") }

// recordedOutcome returns the outcome an earlier execution of this attempt
// recorded, if there is one.
func (a *attempt) recordedOutcome() (activities.ContainerResult, error, bool) {
	b, err := os.ReadFile(a.resultPath())
	if err != nil {
		return activities.ContainerResult{}, nil, false
	}
	var rec recorded
	if err := json.Unmarshal(b, &rec); err != nil {
		a.logger.Warn("ignoring an unreadable recorded result", zap.Error(err))
		return activities.ContainerResult{}, nil, false
	}
	if rec.Request != requestDigest(a.req) {
		return activities.ContainerResult{}, nil, false
	}
	if rec.Error != nil {
		return rec.Result, temporal.NewNonRetryableApplicationError(rec.Error.Message, rec.Error.Type, nil, rec.Result), true
	}
	return rec.Result, nil, true
}

// record writes the outcome of the ended process atomically and durably:
// a crash leaves either no record or a whole one.
func (a *attempt) record(res activities.ContainerResult, outcome error) {
	rec := recorded{Request: requestDigest(a.req), Result: res}
	if outcome != nil {
		var app *temporal.ApplicationError
		if !errors.As(outcome, &app) || !slices.Contains(finalErrors, app.Type()) {
			return
		}
		rec.Error = &recordedError{Type: app.Type(), Message: app.Message()}
	}
	if err := supervisor.WriteJSON(a.resultPath(), rec, true); err != nil {
		// Not fatal: without the record a lost report re-runs the step, as
		// before records existed.
		a.logger.Warn("could not record the step's result", zap.Error(err))
	}
}
