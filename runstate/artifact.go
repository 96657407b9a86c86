package runstate

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/atelier-ml/atelier/pipeline"
)

// Artifact is a reference to stored bytes a step wrote or read: what the
// run status and workflow histories carry instead of content. The bytes
// are in the project's object store under their Digest; the Postgres
// catalogue holds the same facts for lineage queries.
type Artifact struct {
	// ID names the artifact in REST (ArtifactID of its producer).
	ID string `json:"id"`
	// Name is the producer's output name; on an input (StepStatus.Inputs)
	// it is the consumer's input name and From names the producer's.
	Name string `json:"name"`
	From string `json:"from,omitempty"`
	Type string `json:"type"`
	// Digest is "sha256:<hex>" of the file, or of a directory's manifest.
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	// Files is how many files a directory holds; 0 for a file.
	Files int `json:"files,omitempty"`
	// Producer is the run, step, item and attempt that wrote it.
	Producer ArtifactProducer `json:"producer"`
	// Register names the registered model this artifact becomes a
	// version of once recorded (pipeline.ArtifactOutput.Register).
	Register string `json:"register,omitempty"`
	// Source is the URI an imported artifact's bytes came from
	// (pipeline.ArtifactInput.URI); its producer is the importing step,
	// attempt 0. Empty for what a step wrote.
	Source string `json:"source,omitempty"`
}

// ArtifactProducer is where an artifact was written.
type ArtifactProducer struct {
	Run     string `json:"run"`
	Step    string `json:"step"`
	Item    *int   `json:"item,omitempty"`
	Attempt int    `json:"attempt"`
}

// StoredOutput is the artifact an attempt stored for its declared output
// out: the ID, type and producer are derived, the bytes' digest, size
// and file count are the store's.
func StoredOutput(project string, producer ArtifactProducer, out pipeline.ArtifactOutput, digest string, size int64, files int) Artifact {
	return Artifact{
		ID:   ArtifactID(project, producer.Run, producer.Step, producer.Item, out.Name),
		Name: out.Name, Type: string(out.ArtifactType()),
		Digest: digest, Size: size, Files: files,
		Producer: producer,
		Register: out.Register,
	}
}

// Imported is the artifact an import of in.URI stored for the step
// (item) of producer that reads it: attempt 0, named after the input (its
// ID cannot meet an output's of the same name: imports are keyed apart).
// A directory (files > 0) is a dataset, a file a file.
func Imported(project string, producer ArtifactProducer, in pipeline.ArtifactInput, digest string, size int64, files int) Artifact {
	typ := pipeline.ArtifactFile
	if files > 0 {
		typ = pipeline.ArtifactDataset
	}
	producer.Attempt = 0
	return Artifact{
		ID:   ArtifactID(project, producer.Run, producer.Step, producer.Item, "import:"+in.Name),
		Name: in.Name, From: in.Ref(), Type: string(typ),
		Digest: digest, Size: size, Files: files,
		Producer: producer, Source: in.URI,
	}
}

// ArtifactID is the stable ID of the artifact a run's step (item) writes
// under name: the same in the workflow, the catalogue and REST, and
// computed, so that recording it twice records it once.
func ArtifactID(project, run, step string, item *int, name string) string {
	it := "-"
	if item != nil {
		it = strconv.Itoa(*item)
	}
	sum := sha256.Sum256([]byte(project + "\x00" + run + "\x00" + step + "\x00" + it + "\x00" + name))
	return hex.EncodeToString(sum[:16])
}
