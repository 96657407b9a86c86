package pipeline

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/atelier-ml/atelier/schema"
)

// Artifacts are the files and directories a container step reads and
// writes through the project's object store: inputs are in place before
// its command starts ($ATELIER_INPUTS/<name>), outputs are stored after it
// succeeded (what it wrote at $ATELIER_ARTIFACTS/<path>). Histories and the
// run status carry references (digest, size), never content.
type Artifacts struct {
	Inputs  []ArtifactInput  `json:"inputs,omitempty"`
	Outputs []ArtifactOutput `json:"outputs,omitempty"`
}

// ArtifactInput is an artifact the step reads, named by exactly one of:
// From, another step's output artifact as "<step>.<artifact>" (which
// makes the step depend on that one; from a forEach step, the input is a
// directory holding each item's artifact under its index: <Name>/0, ...;
// from a pipeline step, <artifact> is one its child pipeline exports,
// Spec.Artifacts, checked against the stored child when the spec is
// stored and when the child run ends); Artifact, an artifact's ID (of any
// earlier run of the project); Model, a registered model's version as
// "<model>@<alias|version>" (or "<model>" for its latest). Artifact and
// Model may be templates ("{{ params.dataset }}"); URI, an object (or,
// ending in "/", every object under a prefix: a directory) outside the
// project's store, imported into it before the step (by the worker, under
// a prefix the operator allows the project: --artifacts-import), so that
// it has a digest, lineage and a place in the cache key like any other
// input. URI may be a template too. The step finds it at
// $ATELIER_INPUTS/<Name>, a file or a directory as it was stored.
type ArtifactInput struct {
	Name     string `json:"name"`
	From     string `json:"from,omitempty"`
	Artifact string `json:"artifact,omitempty"`
	Model    string `json:"model,omitempty"`
	URI      string `json:"uri,omitempty"`
}

// IsRef reports whether the input is resolved before the step runs, from
// the catalogue (Artifact or Model) or by importing a URI, rather than
// another step's output.
func (in ArtifactInput) IsRef() bool { return in.Artifact != "" || in.Model != "" || in.URI != "" }

// IsImport reports whether the input is imported from a URI.
func (in ArtifactInput) IsImport() bool { return in.URI != "" }

// Ref is how the run status shows where an input resolved before the
// step came from: "artifact:<id>", "model:<model>@<ref>" or "uri:<uri>".
func (in ArtifactInput) Ref() string {
	switch {
	case in.Artifact != "":
		return "artifact:" + in.Artifact
	case in.URI != "":
		return "uri:" + in.URI
	}
	return "model:" + in.Model
}

// ImportSchemes are the URI schemes an input may be imported from: the
// object stores the worker opens (S3, through gocloud.dev/blob), and
// HTTP(S).
var ImportSchemes = []string{"s3", "https", "http"}

// BadImportURI says why u cannot name an import ("" when it can): an
// absolute URI of an ImportSchemes scheme, with a bucket or host and a
// path, no credentials, query or fragment (a bucket's options, such as
// its region, are the operator's, in --artifacts-import).
func BadImportURI(u string) string {
	pu, err := url.Parse(u)
	switch {
	case err != nil:
		return fmt.Sprintf("%q is not a URI: %v", u, err)
	case !slices.Contains(ImportSchemes, pu.Scheme):
		return fmt.Sprintf("%q: the scheme must be one of %s", u, strings.Join(ImportSchemes, ", "))
	case pu.Host == "":
		return fmt.Sprintf("%q names no bucket or host", u)
	case pu.User != nil:
		return fmt.Sprintf("%q must not hold credentials", u)
	case pu.RawQuery != "" || pu.Fragment != "" || strings.HasSuffix(u, "?") || strings.HasSuffix(u, "#"):
		return fmt.Sprintf("%q must have no query or fragment (a bucket's options are the operator's)", u)
	case strings.Trim(pu.Path, "/") == "":
		return fmt.Sprintf("%q names no object (a path after the bucket or host)", u)
	case strings.Contains(pu.Path, "/../") || strings.HasSuffix(pu.Path, "/..") || strings.Contains(pu.Path, "/./") || strings.Contains(pu.Path, "//"):
		return fmt.Sprintf("%q: the path must be clean (no '.', '..' or empty segments)", u)
	}
	return ""
}

var artifactIDRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// ArtifactOutput is an artifact the step writes: the file or directory at
// $ATELIER_ARTIFACTS/<Path> (Path defaults to Name) once the step
// succeeded. A declared output the step did not write fails the step.
type ArtifactOutput struct {
	Name string       `json:"name"`
	Path string       `json:"path,omitempty"`
	Type ArtifactType `json:"type,omitempty"`
	// Register makes the stored output a new version of the project's
	// registered model of that name (created on first use). Its type is
	// model.
	Register string `json:"register,omitempty"`
}

// ArtifactType says what an artifact holds, for people and the UI; the
// bytes are stored alike.
type ArtifactType string

// The artifact types.
const (
	ArtifactFile    ArtifactType = "file" // the default
	ArtifactDataset ArtifactType = "dataset"
	ArtifactModel   ArtifactType = "model"
	ArtifactMetrics ArtifactType = "metrics" // small JSON the UI shows
)

// ArtifactTypes are the valid types, in the order docs list them.
var ArtifactTypes = []ArtifactType{ArtifactFile, ArtifactDataset, ArtifactModel, ArtifactMetrics}

// StoredPath is where the step writes the output, relative to
// $ATELIER_ARTIFACTS.
func (o ArtifactOutput) StoredPath() string {
	if o.Path != "" {
		return o.Path
	}
	return o.Name
}

// ArtifactType is the output's type: ArtifactFile when unset, or
// ArtifactModel when it registers a model.
func (o ArtifactOutput) ArtifactType() ArtifactType {
	switch {
	case o.Type != "":
		return o.Type
	case o.Register != "":
		return ArtifactModel
	}
	return ArtifactFile
}

// ArtifactNamePattern is what an artifact's name looks like: it names a
// file under $ATELIER_INPUTS and appears in references ("step.name").
const ArtifactNamePattern = `^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$`

var artifactNameRE = regexp.MustCompile(ArtifactNamePattern)

// SplitArtifactRef splits an input's From ("<step>.<artifact>") at its
// last dot. ok is false when either part is empty.
func SplitArtifactRef(from string) (step, artifact string, ok bool) {
	i := strings.LastIndexByte(from, '.')
	if i <= 0 || i == len(from)-1 {
		return "", "", false
	}
	return from[:i], from[i+1:], true
}

// validateArtifacts checks the artifacts of a step's work (at path ap:
// a container's or a ray job's): names valid and unique per direction,
// output paths clean and relative, inputs naming an output of another
// step of the pipeline, templates in catalogue references valid (check).
// One set of rules whatever moves the bytes.
func validateArtifacts(ap string, p *Spec, self int, a *Artifacts, check func(path, v string), ps *problems) {
	seen := map[string]bool{}
	for j, o := range a.Outputs {
		op := index(field(ap, "outputs"), j)
		checkArtifactName(field(op, "name"), o.Name, seen, ps)
		if o.Path != "" {
			if msg := badArtifactPath(o.Path); msg != "" {
				ps.add(field(op, "path"), "%s", msg)
			}
		}
		if o.Type != "" && !validArtifactType(o.Type) {
			ps.add(field(op, "type"), "%q is not an artifact type (file, dataset, model, metrics)", o.Type)
		}
		if o.Register != "" {
			switch {
			case !schema.ValidModelName(o.Register):
				ps.add(field(op, "register"), "%q is not a model name (lowercase letters, digits, '.', '_', '-'; at most 63)", o.Register)
			case o.ArtifactType() != ArtifactModel:
				ps.add(field(op, "register"), "only a model artifact registers as a model version (this one is a %s)", o.ArtifactType())
			}
		}
	}
	seen = map[string]bool{}
	for j, in := range a.Inputs {
		ip := index(field(ap, "inputs"), j)
		checkArtifactName(field(ip, "name"), in.Name, seen, ps)
		if strings.Contains(in.Artifact, "{{") {
			check(field(ip, "artifact"), in.Artifact)
		}
		if strings.Contains(in.Model, "{{") {
			check(field(ip, "model"), in.Model)
		}
		if strings.Contains(in.URI, "{{") {
			check(field(ip, "uri"), in.URI)
		}
		n := 0
		for _, v := range []string{in.From, in.Artifact, in.Model, in.URI} {
			if v != "" {
				n++
			}
		}
		if n != 1 {
			ps.add(ip, "name the input with exactly one of from (<step>.<artifact>), artifact (an artifact ID), model (<model>@<alias|version>) or uri (s3://bucket/key, https://host/path, ...)")
			continue
		}
		switch {
		case in.URI != "" && !strings.Contains(in.URI, "{{"):
			if msg := BadImportURI(in.URI); msg != "" {
				ps.add(field(ip, "uri"), "%s", msg)
			}
			continue
		case in.Artifact != "" && !strings.Contains(in.Artifact, "{{") && !artifactIDRE.MatchString(in.Artifact):
			ps.add(field(ip, "artifact"), "%q is not an artifact ID (32 hexadecimal digits)", in.Artifact)
			continue
		case in.Model != "" && !strings.Contains(in.Model, "{{"):
			if _, err := schema.ParseModelRef(in.Model); err != nil {
				ps.add(field(ip, "model"), "%s", err)
			}
			continue
		case in.IsRef():
			continue
		}
		step, name, ok := SplitArtifactRef(in.From)
		if !ok {
			ps.add(field(ip, "from"), "%q is not a reference to another step's artifact (<step>.<artifact>)", in.From)
			continue
		}
		k := -1
		for i := range p.Steps {
			if p.Steps[i].Name == step {
				k = i
				break
			}
		}
		switch {
		case k < 0:
			ps.add(field(ip, "from"), "no step named %q in this pipeline", step)
		case k == self:
			ps.add(field(ip, "from"), "a step cannot read its own artifact")
		case p.Steps[k].Kind == KindPipeline:
			// The child pipeline is known when the spec is stored
			// (CheckChildArtifacts) and when its run ends: a version
			// stored since may export other artifacts.
		case !declaresOutput(p.Steps[k].DeclaredArtifacts(), name):
			ps.add(field(ip, "from"), "step %q declares no output artifact named %q", step, name)
		}
	}
}

// DeclaredArtifacts is what the step's work reads and writes: its
// container's artifacts, or its ray or spark job's (RayStep.Artifacts,
// SparkStep.Artifacts); nil when it declares none. The one place that
// knows which kinds have artifacts.
func (s *Step) DeclaredArtifacts() *Artifacts {
	switch {
	case s.Kind == KindRay && s.Ray != nil:
		return s.Ray.Artifacts
	case s.Kind == KindSpark && s.Spark != nil:
		return s.Spark.Artifacts
	case (s.Kind == "" || s.Kind == KindContainer) && s.Container != nil:
		return s.Container.Artifacts
	}
	return nil
}

func declaresOutput(a *Artifacts, name string) bool {
	if a == nil {
		return false
	}
	for _, o := range a.Outputs {
		if o.Name == name {
			return true
		}
	}
	return false
}

func checkArtifactName(p, name string, seen map[string]bool, ps *problems) {
	switch {
	case !artifactNameRE.MatchString(name):
		ps.add(p, "%q is not an artifact name (lowercase letters, digits, '_', '-'; at most 63)", name)
	case seen[name]:
		ps.add(p, "%q is declared twice", name)
	}
	seen[name] = true
}

func validArtifactType(t ArtifactType) bool {
	for _, v := range ArtifactTypes {
		if v == t {
			return true
		}
	}
	return false
}

// badArtifactPath says why p cannot name an output under
// $ATELIER_ARTIFACTS ("" when it can): relative, clean, no "..", no
// templates. The runtime also refuses symlinks that leave the directory.
func badArtifactPath(p string) string {
	switch {
	case strings.Contains(p, "{{"):
		return "templates are not supported in artifact paths"
	case strings.ContainsRune(p, 0) || strings.Contains(p, `\`):
		return "must not contain NUL or backslash"
	case path.IsAbs(p):
		return "must be relative to $ATELIER_ARTIFACTS"
	case path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../"):
		return "must be a clean path inside $ATELIER_ARTIFACTS (no '.', '..' or trailing '/')"
	}
	return ""
}

func hasRefTemplates(a *Artifacts) bool {
	for _, in := range a.Inputs {
		if strings.Contains(in.Artifact, "{{") || strings.Contains(in.Model, "{{") || strings.Contains(in.URI, "{{") {
			return true
		}
	}
	return false
}
