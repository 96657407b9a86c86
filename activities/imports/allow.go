package imports

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/atelier-ml/atelier/pipeline"
)

// Rule lets Project (every project when empty) import the URIs that start
// with Prefix. Options are the bucket's gocloud URL options for an
// object store (s3's region, endpoint, ...): the operator's, never a
// pipeline's.
type Rule struct {
	Project string
	Prefix  string
	Options url.Values
}

// Allow is the operator's allowlist of import prefixes.
type Allow []Rule

// ParseAllow reads --artifacts-import: comma-separated entries, each
// "[<project>=]<prefix>[?<bucket options>]", e.g.
// "https://huggingface.co/,team-a=s3://team-a-data/raw/?region=eu-west-1".
// A prefix is an absolute URI of a scheme imports read
// (pipeline.ImportSchemes) with a host; one not ending in "/" still
// matches only at a path segment's end (s3://b/data matches s3://b/data/x
// and s3://b/data, not s3://b/database).
func ParseAllow(s string) (Allow, error) {
	var out Allow
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		var r Rule
		if i := strings.Index(e, "="); i >= 0 && !strings.Contains(e[:i], "://") {
			r.Project, e = e[:i], e[i+1:]
			if r.Project == "" {
				return nil, fmt.Errorf("artifacts import entry %q: empty project before '='", e)
			}
		}
		u, err := url.Parse(e)
		if err != nil {
			return nil, fmt.Errorf("artifacts import entry %q: %v", e, err)
		}
		if !slices.Contains(pipeline.ImportSchemes, u.Scheme) || u.Host == "" || u.User != nil || u.Fragment != "" {
			return nil, fmt.Errorf("artifacts import entry %q: want <scheme>://<bucket or host>/<path> with a scheme of %s, no credentials", e, strings.Join(pipeline.ImportSchemes, ", "))
		}
		if u.RawQuery != "" && !isBucket(u.Scheme) {
			return nil, fmt.Errorf("artifacts import entry %q: options (?...) are for object stores, not %s", e, u.Scheme)
		}
		r.Options = u.Query()
		u.RawQuery = ""
		r.Prefix = u.String()
		out = append(out, r)
	}
	return out, nil
}

// isBucket reports whether scheme names an object store (opened with
// gocloud.dev/blob) rather than an HTTP server.
func isBucket(scheme string) bool { return scheme != "http" && scheme != "https" }

// Match returns the rule that lets project import uri: the longest prefix
// among the rules for that project or every project.
func (a Allow) Match(project, uri string) (Rule, bool) {
	var best Rule
	found := false
	for _, r := range a {
		if r.Project != "" && r.Project != project {
			continue
		}
		if !prefixMatches(r.Prefix, uri) {
			continue
		}
		if !found || len(r.Prefix) > len(best.Prefix) {
			best, found = r, true
		}
	}
	return best, found
}

func prefixMatches(prefix, uri string) bool {
	if !strings.HasPrefix(uri, prefix) {
		return false
	}
	return strings.HasSuffix(prefix, "/") || len(uri) == len(prefix) || uri[len(prefix)] == '/'
}

// For lists the prefixes project may import from, for error messages
// (never another project's rules).
func (a Allow) For(project string) []string {
	var out []string
	for _, r := range a {
		if r.Project == "" || r.Project == project {
			out = append(out, r.Prefix)
		}
	}
	return out
}
