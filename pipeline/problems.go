package pipeline

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/atelier-ml/atelier/schema"
)

// problems accumulates findings so that callers see every mistake in one
// round trip instead of fixing a spec one error at a time.
type problems struct {
	list []schema.Problem
}

func (ps *problems) add(path, format string, args ...any) {
	ps.list = append(ps.list, schema.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// err returns nil when nothing was found so callers can return it directly.
func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	return &schema.ValidationError{Subject: "pipeline", Problems: ps.list}
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// field appends a JSON field name to a path.
func field(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// key appends a map key to a path, quoting it when it would be ambiguous.
func key(path, k string) string {
	if identRE.MatchString(k) {
		return field(path, k)
	}
	return path + "[" + strconv.Quote(k) + "]"
}

// index appends an array index to a path.
func index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// sortProblems orders problems by document section and step/param index while
// keeping discovery order inside one element, so output is stable and reads
// top to bottom like the spec.
func sortProblems(list []schema.Problem) {
	type rank struct {
		section int
		idx     int
	}
	rk := func(p string) rank {
		sections := []string{"name", "description", "deadline", "params", "placement", "rayClusters", "steps", "outputs", "artifacts", "onExitTimeout", "onExit"}
		head := p
		if i := strings.IndexAny(head, ".["); i >= 0 {
			head = head[:i]
		}
		sec := len(sections)
		for i, s := range sections {
			if s == head {
				sec = i
			}
		}
		if p == "" {
			sec = -1
		}
		idx := -1
		rest := p[len(head):]
		if strings.HasPrefix(rest, "[") {
			if j := strings.IndexByte(rest, ']'); j > 0 {
				if n, err := strconv.Atoi(rest[1:j]); err == nil {
					idx = n
				}
			}
		}
		return rank{sec, idx}
	}
	sort.SliceStable(list, func(i, j int) bool {
		a, b := rk(list[i].Path), rk(list[j].Path)
		if a.section != b.section {
			return a.section < b.section
		}
		return a.idx < b.idx
	})
}

// levenshtein is used only to suggest the intended field name for a typo.
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// suggest returns the closest candidate within a small edit distance, or "".
func suggest(name string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if strings.EqualFold(c, name) {
			return c
		}
		if d := levenshtein(strings.ToLower(name), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// SortProblems orders problems as Validate does, for callers that add
// their own (the gateway's checks of pipeline steps against the
// catalogue) to Validate's.
func SortProblems(list []schema.Problem) { sortProblems(list) }
