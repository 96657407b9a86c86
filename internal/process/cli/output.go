package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"
)

// Output formats (-o).
const (
	outTable = "table"
	outJSON  = "json"
	outYAML  = "yaml"
)

// table is rows for -o table; the header comes first.
type table [][]string

// print writes v as JSON or YAML, or t as an aligned table.
func (o *options) print(w io.Writer, v any, t func() table) error {
	switch o.output {
	case outJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case outYAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case outTable, "":
		return writeTable(w, t())
	}
	return fmt.Errorf("unknown output format %q: use table, json or yaml", o.output)
}

func writeTable(w io.Writer, t table) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range t {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// ago prints a time as a short age ("3m", "2h", "5d").
func ago(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// span prints how long something ran (still running: until now).
func span(start, end *time.Time, now time.Time) string {
	if start == nil {
		return "-"
	}
	e := now
	if end != nil {
		e = *end
	}
	return e.Sub(*start).Round(100 * time.Millisecond).String()
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
