package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
	"github.com/atelier-ml/atelier/internal/stack/s3test"
)

const rayArtifactsPipeline = `
steps:
  - name: prepare
    container:
      command: [sh, -c, 'mkdir -p "$ATELIER_ARTIFACTS/data/train" && printf "1,2\n" > "$ATELIER_ARTIFACTS/data/train/a.csv" && printf "3,4\n" > "$ATELIER_ARTIFACTS/data/b.csv"']
      artifacts:
        outputs: [{name: dataset, path: data, type: dataset}]
  - name: train
    kind: ray
    ray:
      entrypoint: python train.py
      image: rayproject/ray:2.9.0
      workers: [{name: cpu, replicas: 1}]
      artifacts:
        inputs: [{name: data, from: prepare.dataset}]
        outputs: [{name: model, path: ckpt/final, type: model}, {name: report}]
  - name: evaluate
    container:
      command: [sh, -c, 'test "$(cat "$ATELIER_INPUTS/m/weights.bin")" = "trained on 1,2;3,4" && test "$(cat "$ATELIER_INPUTS/m/meta/info.json")" = "{}" && test "$(cat "$ATELIER_INPUTS/r")" = ok']
      artifacts:
        inputs: [{name: m, from: train.model}, {name: r, from: train.report}]
`

// A ray step's artifacts on the real control plane (API server,
// controllers, the real KubeRay operator, kwok nodes) with versitygw as
// both the artifact store and the staging store. The test plays the Ray
// job, as a real one would with its pods' own S3 identity: it reads the
// RayJob's runtime_env for $ATELIER_INPUTS_URI and $ATELIER_ARTIFACTS_URI,
// checks the dataset a local step wrote is under the first, and writes a
// checkpoint directory (with an S3 "directory marker", as some tools
// write) and a report under the second. The run's status then shows the
// outputs with digests, a local step reads them, lineage links them to
// the dataset, and the staging store is empty. A job that writes nothing
// fails its step naming the output.
func TestRayStepArtifactsThroughStaging(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Kubernetes control plane")
	}
	srv := s3test.Start(t)
	srv.Setenv(t) // gateway and workers run in this process
	ctx := context.Background()
	pods, err := blob.OpenBucket(ctx, srv.URL(""))
	require.NoError(t, err)
	defer pods.Close()

	var (
		mu       sync.Mutex
		problems []string
		uris     = map[string][2]string{} // run → inputs and outputs URIs
		e        *kubeEnv
	)
	fail := func(format string, args ...any) kubetest.Exit {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, fmt.Sprintf(format, args...))
		return kubetest.Exit{Code: 3, Message: fmt.Sprintf(format, args...)}
	}
	// key is the bucket key of an s3:// URI the job was given.
	key := func(uri string) string {
		u, err := url.Parse(uri)
		if err != nil || u.Scheme != "s3" || u.Host != srv.Bucket {
			return ""
		}
		return strings.TrimPrefix(u.Path, "/")
	}
	play := func(p kubetest.PodRef) kubetest.Exit {
		if p.Kind != "rayjob" {
			return kubetest.Exit{Code: 9, Message: "not a ray submitter"}
		}
		rj, err := e.ray.RayV1().RayJobs(p.Namespace).Get(ctx, p.Labels["job-name"], metav1.GetOptions{})
		if err != nil {
			return fail("%v", err)
		}
		var env struct {
			EnvVars map[string]string `json:"env_vars"`
		}
		if err := yaml.Unmarshal([]byte(rj.Spec.RuntimeEnvYAML), &env); err != nil {
			return fail("runtime_env: %v", err)
		}
		in, out := env.EnvVars["ATELIER_INPUTS_URI"], env.EnvVars["ATELIER_ARTIFACTS_URI"]
		mu.Lock()
		uris[rj.Labels["atelier.dev/run"]] = [2]string{in, out}
		mu.Unlock()
		if key(in) == "" || key(out) == "" {
			return fail("runtime_env names no staging URIs in this bucket: %q, %q", in, out)
		}
		a, err := pods.ReadAll(ctx, key(in)+"/data/train/a.csv")
		if err != nil {
			return fail("input: %v", err)
		}
		b, err := pods.ReadAll(ctx, key(in)+"/data/b.csv")
		if err != nil {
			return fail("input: %v", err)
		}
		if rj.Labels["atelier.dev/step"] == "train" && strings.Contains(rj.Spec.Entrypoint, "nothing") {
			return kubetest.Exit{After: 200 * time.Millisecond, Message: `{}`}
		}
		for k, v := range map[string]string{
			"/ckpt/final/weights.bin":    "trained on " + strings.TrimSpace(string(a)) + ";" + strings.TrimSpace(string(b)),
			"/ckpt/final/meta/info.json": "{}",
			"/ckpt/final/":               "",
			"/report":                    "ok",
		} {
			if err := pods.WriteAll(ctx, key(out)+k, []byte(v), nil); err != nil {
				return fail("output: %v", err)
			}
		}
		return kubetest.Exit{After: 200 * time.Millisecond, Message: `{"epochs": 3}`}
	}
	e = newKubeEnv(t, func(string) kubetest.Exit { return kubetest.Exit{} }, true, stackOptions{
		podScript: play, artifactsURL: srv.URL("atelier/"),
		stagingURL: srv.URL("staging/"), stagingURI: "s3://" + srv.Bucket + "/staging",
	})

	e.createPipeline("ray-artifacts", rayArtifactsPipeline)
	id := e.start("ray-artifacts", nil)
	r := e.waitTerminal(id, 3*time.Minute)
	mu.Lock()
	assert.Empty(t, problems)
	got := uris[id]
	mu.Unlock()
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	prefix := "s3://" + srv.Bucket + "/staging/" + e.project + "/" + id + "/train/1"
	assert.Equal(t, [2]string{prefix + "/inputs", prefix + "/outputs"}, got, "the job's staging URIs")

	prep, train, eval := stepByName(r, "prepare"), stepByName(r, "train"), stepByName(r, "evaluate")
	dataset := val(prep.Artifacts)[0]
	require.Len(t, val(train.Inputs), 1)
	assert.Equal(t, dataset.Digest, val(train.Inputs)[0].Digest, "train read what prepare wrote")
	require.Len(t, val(train.Artifacts), 2)
	model, report := val(train.Artifacts)[0], val(train.Artifacts)[1]
	assert.Equal(t, "model", model.Type)
	assert.Equal(t, 2, val(model.Files), "the checkpoint's two files (not the directory marker)")
	assert.Equal(t, int64(len("trained on 1,2;3,4")+2), model.Size)
	assert.True(t, strings.HasPrefix(model.Digest, "sha256:"), model.Digest)
	assert.Equal(t, "file", report.Type)
	assert.Equal(t, int64(2), report.Size)
	assert.Equal(t, map[string]any{"epochs": float64(3)}, train.Outputs)
	assert.Equal(t, gen.StepStateSUCCEEDED, eval.State, "evaluate read the ray job's outputs: %s", val(eval.Error))

	// Lineage: the model was made from the dataset, and read by evaluate.
	var lin gen.ArtifactLineage
	require.Eventually(t, func() bool {
		code, body := e.raw("GET", e.path("/artifacts/%s", model.Id), nil)
		return code == 200 && json.Unmarshal(body, &lin) == nil && len(lin.Consumers) == 1
	}, 10*time.Second, 100*time.Millisecond, "lineage of %s: %+v", model.Id, lin)
	assert.Equal(t, "train", lin.Artifact.Producer.Step)
	require.Len(t, lin.MadeFrom, 1)
	assert.Equal(t, dataset.Id, lin.MadeFrom[0].Artifact.Id)
	assert.Equal(t, "evaluate", lin.Consumers[0].Step)
	assert.Empty(t, stagingKeys(t, pods), "the staging store after the run")

	// A job that writes nothing: the step fails naming the output.
	e.createPipeline("ray-artifacts-missing", strings.Replace(rayArtifactsPipeline, "python train.py", "python nothing.py", 1))
	id = e.start("ray-artifacts-missing", nil)
	r = e.waitTerminal(id, 3*time.Minute)
	require.Equal(t, gen.RunStateFAILED, r.State)
	train = stepByName(r, "train")
	assert.Contains(t, val(train.Error), `the job wrote no output artifact "model": nothing at s3://`+srv.Bucket+`/staging/`+e.project+`/`+id+`/train/1/outputs/ckpt/final`)
	assert.Empty(t, stagingKeys(t, pods), "the staging store after the failed run")
}

// stagingKeys lists what the staging store holds.
func stagingKeys(t *testing.T, b *blob.Bucket) []string {
	t.Helper()
	var keys []string
	it := b.List(&blob.ListOptions{Prefix: "staging/"})
	for {
		o, err := it.Next(context.Background())
		if err == io.EOF {
			return keys
		}
		require.NoError(t, err)
		keys = append(keys, o.Key)
	}
}
