package launch

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/atelier-ml/atelier/internal/platform/artifactstore/tree"
)

// Where things are in a step's pod.
const (
	// Volume is the emptyDir the launcher and the step's artifacts live
	// in, mounted at Dir in the init container and the step's container.
	Volume = "atelier-launcher"
	Dir    = "/atelier"
	// Binary is where the init container puts the launcher.
	Binary = Dir + "/bin/atelier-launcher"
	// InputsDir is the step's $ATELIER_INPUTS, ArtifactsDir its
	// $ATELIER_ARTIFACTS, OutputsFile its $ATELIER_OUTPUTS: the launcher
	// reads the outputs there and writes its Result to the termination
	// message.
	InputsDir    = Dir + "/inputs"
	ArtifactsDir = Dir + "/artifacts"
	OutputsFile  = Dir + "/outputs.json"
	// MetricsFile is the step's $ATELIER_METRICS: the launcher stores it
	// as an object and the worker reads and checks it.
	MetricsFile = Dir + "/metrics.json"
	// SpecEnv holds the Spec (JSON); GrantEnv the sealed Grant, from the
	// attempt's Secret under GrantKey.
	SpecEnv  = "ATELIER_LAUNCH"
	GrantEnv = "ATELIER_LAUNCH_GRANT"
	// GrantKey is the grant's key in the attempt's Secret. Project secrets'
	// names cannot start with a dot, so it never meets one.
	GrantKey = ".atelier-launch-grant"
)

// Spec is what the launcher does around the step's command.
type Spec struct {
	// Gateway is the gateway's base URL as the pod reaches it.
	Gateway string `json:"gateway"`
	// Inputs are downloaded to InputsDir/<Name> before the command starts.
	Inputs []Input `json:"inputs,omitempty"`
	// Outputs are stored from ArtifactsDir/<Path> once the command exits 0.
	Outputs []Output `json:"outputs,omitempty"`
	// ResultPath is where the Result goes: the container's termination
	// message file.
	ResultPath string `json:"resultPath"`
}

// Input is an artifact the step reads.
type Input struct {
	Name   string `json:"name"` // a path under InputsDir: <input> or <input>/<item>
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	Files  int    `json:"files,omitempty"`
}

// Object is the input as the tree package knows it.
func (in Input) Object() tree.Object {
	return tree.Object{Digest: in.Digest, Size: in.Size, Files: in.Files}
}

// Output is an artifact the step writes.
type Output struct {
	Name string `json:"name"`
	Path string `json:"path"` // under ArtifactsDir
}

// Result is what the launcher writes to the termination message: the
// outputs the step wrote, references to the artifacts it stored, or why
// the launcher failed. It must fit the kubelet's 4 KiB.
type Result struct {
	Launcher  int             `json:"atelierLauncher"` // ResultVersion: tells a Result from a step's own outputs
	Outputs   json.RawMessage `json:"outputs,omitempty"`
	Artifacts []Stored        `json:"artifacts,omitempty"`
	// Metrics is the metrics file the step wrote, stored as an object (it
	// may not fit the termination message); nil when it wrote none.
	Metrics *Stored `json:"metrics,omitempty"`
	// Error says why the launcher failed the step (the command's own
	// failure is its exit code); Kind classifies it.
	Error string    `json:"error,omitempty"`
	Kind  ErrorKind `json:"kind,omitempty"`
}

// ResultVersion is the Result format's version.
const ResultVersion = 1

// ErrorKind classifies a launcher's failure: whether retrying can help.
type ErrorKind string

const (
	// ErrTransfer: the store or the gateway could not be reached or
	// refused; a retry may succeed.
	ErrTransfer ErrorKind = "transfer"
	// ErrOutputs: the step did not write a declared output, or wrote a
	// link or a special file there; retrying the same code cannot help.
	ErrOutputs ErrorKind = "outputs"
	// ErrSetup: the launcher was started wrongly (no spec, no grant).
	ErrSetup ErrorKind = "setup"
	// ErrLimit: storing the outputs would take the project past the
	// operator's cap on its artifacts; retrying cannot help until space
	// is freed.
	ErrLimit ErrorKind = "limit"
)

// ErrOverLimit is what the client returns when the gateway refuses to
// store because of the project's artifact cap (HTTP 507).
var ErrOverLimit = errors.New("over the project's artifact limit")

// MaxMetrics bounds the metrics file the launcher stores: the worker
// checks it against the real limit (runstate.MaxMetricsBytes, smaller).
const MaxMetrics = 1 << 20

// Stored is an output artifact the launcher stored.
type Stored struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	Files  int    `json:"files,omitempty"`
}

// ParseResult reads a launcher's Result from a termination message.
func ParseResult(msg string) (Result, error) {
	var r Result
	if err := json.Unmarshal([]byte(msg), &r); err != nil {
		return Result{}, fmt.Errorf("the launcher's result is not JSON (%v): was the step's command run without the launcher, or its result cut at 4 KiB?", err)
	}
	if r.Launcher != ResultVersion {
		return Result{}, errors.New("the termination message is not a launcher's result: the pod's command did not run under the launcher")
	}
	all := r.Artifacts
	if r.Metrics != nil {
		all = append(all[:len(all):len(all)], *r.Metrics)
	}
	for _, a := range all {
		if _, err := tree.Hex(a.Digest); err != nil {
			return Result{}, fmt.Errorf("artifact %q: %w", a.Name, err)
		}
		if a.Size < 0 || a.Files < 0 {
			return Result{}, fmt.Errorf("artifact %q: negative size", a.Name)
		}
	}
	return r, nil
}

// The gateway's routes for launchers, authenticated by a grant (Bearer).
const (
	// SignPath answers a SignRequest with a SignResponse.
	SignPath = "/v1/launcher/sign"
	// ObjectsPath + digest moves an object's bytes through the gateway
	// (GET, PUT with Content-Length) when the store cannot sign URLs.
	ObjectsPath = "/v1/launcher/objects/"
)

// MaxSign is how many objects one SignRequest may name: the gateway's
// work for one request (a stat of the store per Put, a signature per
// object) and its answer (about 1 KiB per signed URL) stay bounded.
const MaxSign = 1000

// URLExpiry is how long a URL the gateway signs works: a transfer must
// start within it (a started one runs to its end).
const URLExpiry = 15 * time.Minute

// SignRequest asks for URLs to read (Get: digests) and write (Put)
// objects.
type SignRequest struct {
	Get []string     `json:"get,omitempty"`
	Put []PutRequest `json:"put,omitempty"`
	// Storing is the size of every output the attempt stores (all their
	// files), sent with each Put: the gateway holds it against the
	// project's artifact cap, so that a directory signed object by object
	// is refused before its first byte rather than half stored. 0: the
	// Puts' own sizes.
	Storing int64 `json:"storing,omitempty"`
}

// PutRequest is an object the launcher wants to store.
type PutRequest struct {
	Digest      string `json:"digest"`
	Size        int64  `json:"size"`
	ContentType string `json:"contentType"`
}

// SignResponse has a Target per requested object: the Gets' then the
// Puts', in the request's order.
type SignResponse struct {
	Get []Target `json:"get,omitempty"`
	Put []Target `json:"put,omitempty"`
}

// Target is how to read or write one object.
type Target struct {
	// Stored: a Put's bytes are stored already (and recently): nothing to
	// send.
	Stored bool   `json:"stored,omitempty"`
	Method string `json:"method,omitempty"`
	URL    string `json:"url,omitempty"`
	// Header must be sent as is (a signed URL's signed headers).
	Header map[string]string `json:"header,omitempty"`
	// Grant: send the grant as a Bearer token (the gateway's own URL; a
	// signed URL never gets it).
	Grant bool `json:"grant,omitempty"`
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ValidDigest reports whether d is a sha256 digest as Atelier writes them.
func ValidDigest(d string) bool { return digestRE.MatchString(d) }
