package local

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/pipeline"
)

// readOutputs reads the file a step wrote to ATELIER_OUTPUTS. A missing file
// means no outputs. Messages name the variable because that is what the
// step's author knows.
func readOutputs(path string) (map[string]any, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read outputs file (ATELIER_OUTPUTS): %v", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && !fi.Mode().IsRegular() {
		return nil, errors.New("outputs file (ATELIER_OUTPUTS) is not a regular file")
	}
	// Read one byte past the limit rather than trust Stat: the file may
	// still be growing if the step left a writer behind.
	b, err := io.ReadAll(io.LimitReader(f, pipeline.MaxOutputsBytes+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read outputs file (ATELIER_OUTPUTS): %v", err)
	}
	if len(b) > pipeline.MaxOutputsBytes {
		return nil, fmt.Errorf("outputs file (ATELIER_OUTPUTS) is larger than the %d KiB limit: write large results to files and output their paths",
			pipeline.MaxOutputsBytes>>10)
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
		return nil, fmt.Errorf("outputs file (ATELIER_OUTPUTS) must hold a JSON object, not %s", activities.JSONKind(t[0]))
	}
	var out map[string]any
	if err := json.Unmarshal(t, &out); err != nil {
		return nil, fmt.Errorf("outputs file (ATELIER_OUTPUTS) is not a valid JSON object: %v", err)
	}
	return out, nil
}
