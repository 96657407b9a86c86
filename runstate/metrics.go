package runstate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/atelier-ml/atelier/pipeline"
)

// Metrics are what a step measured and reported in its metrics file
// (ATELIER_METRICS): a number per name ("accuracy": 0.93) and small series
// ("loss": [0.9, 0.5, 0.31], a curve indexed by position). A step's are
// its succeeded attempt's; runs are compared by them.
type Metrics struct {
	Scalars map[string]float64   `json:"scalars,omitempty"`
	Series  map[string][]float64 `json:"series,omitempty"`
}

// Limits of a metrics file: metrics ride in the run's status, which is
// in workflow history and in every read of the run.
const (
	MaxMetricsBytes  = 32 << 10
	MaxMetrics       = 64
	MaxSeriesPoints  = 1000
	MaxMetricNameLen = pipeline.MaxMetricNameLen
)

// MetricsEnv names the file a step may write its metrics to.
const MetricsEnv = "ATELIER_METRICS"

// MetricsProblem is one thing wrong with a metrics file, at a path such as
// "loss[3]" or "" for the file as a whole.
type MetricsProblem struct {
	Path    string
	Message string
}

// MetricsError lists every problem of a metrics file at once.
type MetricsError struct{ Problems []MetricsProblem }

func (e *MetricsError) Error() string {
	var b bytes.Buffer
	b.WriteString("metrics file (" + MetricsEnv + ") is invalid: ")
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		if p.Path != "" {
			b.WriteString(p.Path + ": ")
		}
		b.WriteString(p.Message)
	}
	return b.String()
}

// ParseMetrics reads a metrics file: a JSON object whose values are finite
// numbers (scalars) or arrays of finite numbers (series). Every problem is
// reported at once, with its path. An empty object gives nil.
func ParseMetrics(b []byte) (*Metrics, error) {
	if len(b) > MaxMetricsBytes {
		return nil, &MetricsError{[]MetricsProblem{{"", fmt.Sprintf("%d KiB; the limit is %d KiB: report a few numbers and short curves, and store the rest as artifacts", len(b)>>10, MaxMetricsBytes>>10)}}}
	}
	t := bytes.TrimSpace(b)
	if len(t) == 0 || t[0] != '{' {
		return nil, &MetricsError{[]MetricsProblem{{"", `must hold a JSON object such as {"accuracy": 0.93, "loss": [0.9, 0.5, 0.31]}`}}}
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, &MetricsError{[]MetricsProblem{{"", "not valid JSON: " + err.Error()}}}
	}
	names := make([]string, 0, len(raw))
	for k := range raw {
		names = append(names, k)
	}
	sort.Strings(names)
	var ps []MetricsProblem
	if len(names) > MaxMetrics {
		ps = append(ps, MetricsProblem{"", fmt.Sprintf("%d metrics; the limit is %d", len(names), MaxMetrics)})
	}
	m := &Metrics{}
	for _, name := range names {
		if why := pipeline.MetricNameProblem(name); why != "" {
			ps = append(ps, MetricsProblem{name, why})
			continue
		}
		v := bytes.TrimSpace(raw[name])
		switch {
		case len(v) > 0 && v[0] == '[':
			var xs []json.RawMessage
			if err := json.Unmarshal(v, &xs); err != nil {
				ps = append(ps, MetricsProblem{name, "not a valid array: " + err.Error()})
				continue
			}
			if len(xs) > MaxSeriesPoints {
				ps = append(ps, MetricsProblem{name, fmt.Sprintf("%d points; a series holds at most %d", len(xs), MaxSeriesPoints)})
				continue
			}
			series := make([]float64, len(xs))
			ok := true
			for i, x := range xs {
				f, err := finite(x)
				if err != nil {
					ps = append(ps, MetricsProblem{fmt.Sprintf("%s[%d]", name, i), err.Error()})
					ok = false
					continue
				}
				series[i] = f
			}
			if ok {
				if m.Series == nil {
					m.Series = map[string][]float64{}
				}
				m.Series[name] = series
			}
		default:
			f, err := finite(v)
			if err != nil {
				ps = append(ps, MetricsProblem{name, err.Error() + " (or an array of numbers, for a series)"})
				continue
			}
			if m.Scalars == nil {
				m.Scalars = map[string]float64{}
			}
			m.Scalars[name] = f
		}
	}
	if len(ps) > 0 {
		return nil, &MetricsError{ps}
	}
	if m.Scalars == nil && m.Series == nil {
		return nil, nil
	}
	return m, nil
}

// finite parses a JSON number that a float64 holds (JSON has no NaN or
// infinity, but 1e999 overflows).
func finite(v json.RawMessage) (float64, error) {
	var n json.Number
	if len(v) == 0 {
		return 0, errors.New("must be a number")
	}
	if (v[0] != '-' && (v[0] < '0' || v[0] > '9')) || json.Unmarshal(v, &n) != nil {
		return 0, fmt.Errorf("must be a number, not %s", JSONKind(v[0]))
	}
	f, err := n.Float64()
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("%s is out of range for a 64-bit float", n)
	}
	return f, nil
}

// JSONKind names the JSON value that starts with first, for messages such
// as "outputs must be a JSON object, not an array". Both runtimes use it so
// a step author reads the same words wherever the step ran.
func JSONKind(first byte) string {
	switch first {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case '{':
		return "an object"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	default:
		return "a number"
	}
}
