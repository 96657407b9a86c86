package local

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// readOutputs reads the file a step wrote to ATELIER_OUTPUTS. A missing file
// means no outputs. Messages name the variable because that is what the
// step's author knows.
func readOutputs(path string) (map[string]any, error) {
	b, err := readStepFile(path, "outputs file (ATELIER_OUTPUTS)", pipeline.MaxOutputsBytes,
		"write large results to files and output their paths")
	if b == nil || err != nil {
		return nil, err
	}
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return nil, errors.New(`outputs file (ATELIER_OUTPUTS) is empty: write a JSON object such as {"accuracy": 0.93}, or do not create the file`)
	}
	if !json.Valid(t) {
		var v any
		err := json.Unmarshal(t, &v)
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("outputs file (ATELIER_OUTPUTS) is not valid JSON: %v (at byte %d)", se, se.Offset)
		}
		return nil, fmt.Errorf("outputs file (ATELIER_OUTPUTS) is not valid JSON: %v", err)
	}
	if t[0] != '{' {
		return nil, fmt.Errorf("outputs file (ATELIER_OUTPUTS) must hold a JSON object, not %s", runstate.JSONKind(t[0]))
	}
	var out map[string]any
	if err := json.Unmarshal(t, &out); err != nil {
		return nil, fmt.Errorf("outputs file (ATELIER_OUTPUTS) is not a valid JSON object: %v", err)
	}
	return out, nil
}

// readMetrics reads the file a step wrote to ATELIER_METRICS (none: nil).
func readMetrics(path string) (*runstate.Metrics, error) {
	b, err := readStepFile(path, "metrics file ("+runstate.MetricsEnv+")", runstate.MaxMetricsBytes,
		"report a few numbers and short curves, and store the rest as artifacts")
	if b == nil || err != nil {
		return nil, err
	}
	return runstate.ParseMetrics(b)
}

// readStepFile reads a file the step wrote for the runtime, up to limit
// bytes: nil, nil when it wrote none. what names the file in messages.
func readStepFile(path, what string, limit int, hint string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %v", what, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", what)
	}
	// Read one byte past the limit rather than trust Stat: the file may
	// still be growing if the step left a writer behind.
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %v", what, err)
	}
	if len(b) > limit {
		return nil, fmt.Errorf("%s is larger than the %d KiB limit: %s", what, limit>>10, hint)
	}
	return b, nil
}
