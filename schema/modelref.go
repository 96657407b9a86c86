package schema

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ModelNamePattern is what a registered model's name (and an alias of
// one) looks like.
const ModelNamePattern = `^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`

var modelNameRE = regexp.MustCompile(ModelNamePattern)

// ValidModelName reports whether name may name a registered model or an
// alias of one.
func ValidModelName(name string) bool { return modelNameRE.MatchString(name) }

// ModelRef names a version of a registered model the way pipeline inputs,
// endpoint specs and inference steps write it: "<model>@<alias>",
// "<model>@<version>" or "<model>" (its latest version).
type ModelRef struct {
	Model string
	// Ref is the alias or the version number as written; "" for the
	// latest version.
	Ref string
}

// SplitModelRef splits "<model>@<ref>" without checking either part.
func SplitModelRef(s string) ModelRef {
	model, ref, _ := strings.Cut(s, "@")
	return ModelRef{Model: model, Ref: ref}
}

// ParseModelRef splits and checks s: an error says what is wrong.
func ParseModelRef(s string) (ModelRef, error) {
	r := SplitModelRef(s)
	if !ValidModelName(r.Model) || strings.Contains(s, "@") && !ValidModelName(r.Ref) {
		return ModelRef{}, fmt.Errorf("%q is not <model>, <model>@<alias> or <model>@<version>", s)
	}
	return r, nil
}

// Version is the version number Ref names, or 0 when Ref is an alias or
// empty.
func (r ModelRef) Version() int {
	n, err := strconv.Atoi(r.Ref)
	if err != nil || n < 1 {
		return 0
	}
	return n
}

// Alias is the alias Ref names, or "" when Ref is a version number or
// empty.
func (r ModelRef) Alias() string {
	if r.Version() > 0 {
		return ""
	}
	return r.Ref
}

func (r ModelRef) String() string {
	if r.Ref == "" {
		return r.Model
	}
	return r.Model + "@" + r.Ref
}
