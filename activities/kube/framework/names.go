package framework

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Label keys. Every object the backend creates carries LabelManagedBy and
// the identity labels of what it belongs to; adoption and cleanup select on
// them.
const (
	LabelManagedBy  = "atelier.dev/managed-by"
	ManagedByValue  = "atelier"
	LabelProject    = "atelier.dev/project"
	LabelRun        = "atelier.dev/run"
	LabelStep       = "atelier.dev/step"
	LabelItem       = "atelier.dev/item"
	LabelAttempt    = "atelier.dev/attempt"
	LabelRayCluster = "atelier.dev/ray-cluster" // a run's shared RayCluster: its name in the spec
	LabelEndpoint   = "atelier.dev/endpoint"    // an inference endpoint's objects and pods
	LabelRevision   = "atelier.dev/revision"    // one revision of an endpoint

	// AnnotationRunID holds the run ID verbatim when it is not a valid
	// label value (run IDs may be 255 characters and contain ':').
	AnnotationRunID = "atelier.dev/run-id"
)

// ManagedSelector selects every object the backend manages.
const ManagedSelector = LabelManagedBy + "=" + ManagedByValue

// identityKeys are the labels that must match for an existing object to be
// adopted: all of them, absent ones included (an item's object is not the
// step's).
var identityKeys = []string{LabelManagedBy, LabelProject, LabelRun, LabelStep, LabelItem, LabelAttempt, LabelRayCluster, LabelEndpoint, LabelRevision}

// Identity names what an object belongs to.
type Identity struct {
	Project string
	Run     string
	Step    string
	Item    *int
	Attempt int
	// RayCluster is set, instead of Step/Item/Attempt, for a run's shared
	// RayCluster.
	RayCluster string
}

// Labels returns the identity labels, values made valid label values.
func (id Identity) Labels() map[string]string {
	l := map[string]string{
		LabelManagedBy: ManagedByValue,
		LabelProject:   LabelValue(id.Project),
		LabelRun:       LabelValue(id.Run),
	}
	if id.Step != "" {
		l[LabelStep] = LabelValue(id.Step)
		l[LabelAttempt] = strconv.Itoa(id.Attempt)
		if id.Item != nil {
			l[LabelItem] = strconv.Itoa(*id.Item)
		}
	}
	if id.RayCluster != "" {
		l[LabelRayCluster] = LabelValue(id.RayCluster)
	}
	return l
}

// Annotations returns what the labels cannot hold verbatim.
func (id Identity) Annotations() map[string]string {
	if LabelValue(id.Run) == id.Run {
		return nil
	}
	return map[string]string{AnnotationRunID: id.Run}
}

// RunSelector selects every object of a run.
func RunSelector(run string) string {
	return ManagedSelector + "," + LabelRun + "=" + LabelValue(run)
}

// SameIdentity reports whether labels carry exactly the identity in want:
// an existing object with these labels is the same run/step/item/attempt
// (or shared cluster) and may be adopted.
func SameIdentity(labels, want map[string]string) bool {
	for _, k := range identityKeys {
		got, ok := labels[k]
		exp, wantOK := want[k]
		if ok != wantOK || got != exp {
			return false
		}
	}
	return true
}

// DescribeIdentity renders the identity labels of an object for messages.
func DescribeIdentity(labels map[string]string) string {
	var parts []string
	for _, k := range identityKeys {
		if v, ok := labels[k]; ok {
			parts = append(parts, k+"="+v)
		}
	}
	if len(parts) == 0 {
		return "no atelier labels"
	}
	return strings.Join(parts, ",")
}

// LabelValue returns s if it is a valid label value, else a valid one
// derived from it: unsafe characters replaced, truncated, and suffixed with
// a hash so that distinct inputs stay distinct.
func LabelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	h := hash10(s)
	b := []byte(sanitize(s, func(c byte) bool {
		return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
	}))
	keep := validation.LabelValueMaxLength - len(h) - 1
	if len(b) > keep {
		b = b[:keep]
	}
	v := strings.Trim(string(b), "-_.")
	if v == "" {
		return h
	}
	return v + "-" + h
}

// ObjectName returns the deterministic name of one attempt's object: the
// step name (made a DNS-1035 label and truncated to fit), the item and
// attempt for humans, and 10 hex digits of sha256(run, step, item, attempt)
// that make it unique. Every execution of the same attempt — a Temporal
// retry after the worker was killed included — computes the same name, which
// is what makes creation idempotent.
func ObjectName(run, step string, item *int, attempt, maxLen int) string {
	itemKey := "-"
	tail := ""
	if item != nil {
		itemKey = strconv.Itoa(*item)
		tail = "-i" + itemKey
	}
	tail += "-a" + strconv.Itoa(attempt) + "-" + hash10(run+"\x00"+step+"\x00"+itemKey+"\x00"+strconv.Itoa(attempt))
	return dns1035Prefix(step, maxLen-len(tail)) + tail
}

// ClusterName returns the deterministic name of a run's shared RayCluster.
func ClusterName(run, cluster string, maxLen int) string {
	return HashedName(cluster, "", run+"\x00"+cluster, maxLen)
}

// HashedName returns a deterministic DNS-1035 label of at most maxLen
// characters: base (made a label, truncated to fit) for humans, then
// suffix, then "-" and 10 hex digits of sha256(key), which keep distinct
// keys distinct however base was truncated.
func HashedName(base, suffix, key string, maxLen int) string {
	tail := suffix + "-" + hash10(key)
	return dns1035Prefix(base, maxLen-len(tail)) + tail
}

// dns1035Prefix makes s the start of a DNS-1035 label of at most n
// characters: lowercase alphanumerics and '-', starting with a letter.
func dns1035Prefix(s string, n int) string {
	p := strings.Trim(sanitize(strings.ToLower(s), func(c byte) bool {
		return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'
	}), "-")
	if p == "" || p[0] < 'a' || p[0] > 'z' {
		p = "x" + p
	}
	if n < 1 {
		n = 1
	}
	if len(p) > n {
		p = p[:n]
	}
	return strings.TrimRight(p, "-")
}

// sanitize replaces runs of characters that ok rejects by a single '-'.
func sanitize(s string, ok func(byte) bool) string {
	var b strings.Builder
	dash := false
	for i := 0; i < len(s); i++ {
		if c := s[i]; ok(c) {
			b.WriteByte(c)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	return b.String()
}

func hash10(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:10]
}

// Namespace expands a namespace template for a project and checks the
// result: "{project}" is replaced by the project name.
func Namespace(template, project string) (string, error) {
	ns := strings.ReplaceAll(template, "{project}", project)
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return "", fmt.Errorf("namespace %q (from the worker's namespace template %q and project %q) is not a valid namespace name: %s",
			ns, template, project, strings.Join(errs, "; "))
	}
	return ns, nil
}

// MergeLabels returns a copy of a with b's entries added (b wins).
func MergeLabels(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}
