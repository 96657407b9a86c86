package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/stack/s3test"
)

// artifactsPipeline prepares a dataset directory, trains a "model" file
// from it (cached: keyed on the dataset's digest), and evaluates the model.
const artifactsPipeline = `
params:
  - name: rows
    type: string
    default: "1,2"
steps:
  - name: prepare
    container:
      command: [sh, -c, 'mkdir -p "$ATELIER_ARTIFACTS/data/train" && printf "%s\n" "$ROWS" > "$ATELIER_ARTIFACTS/data/train/a.csv" && printf "3,4\n" > "$ATELIER_ARTIFACTS/data/b.csv"']
      env: {ROWS: "{{ params.rows }}"}
      artifacts:
        outputs: [{name: dataset, path: data, type: dataset}]
  - name: train
    cache: {}
    container:
      command: [sh, -c, 'cat "$ATELIER_INPUTS/dataset/train/a.csv" "$ATELIER_INPUTS/dataset/b.csv" > "$ATELIER_ARTIFACTS/model.bin" && printf "{\"trained\": true}" > "$ATELIER_OUTPUTS"']
      artifacts:
        inputs: [{name: dataset, from: prepare.dataset}]
        outputs: [{name: model, path: model.bin, type: model}]
  - name: evaluate
    container:
      command: [sh, -c, 'test "$(cat "$ATELIER_INPUTS/model")" = "$(printf "%s\n3,4" "$ROWS")"']
      env: {ROWS: "{{ params.rows }}"}
      artifacts:
        inputs: [{name: model, from: train.model}]
`

// A dataset directory and a model file flow prepare → train → evaluate
// through the stack's artifact store (a directory store here, as in
// `atelier dev`; TestArtifactsOnS3 runs the same on a real S3 server):
// the status carries references, the catalogue answers lineage, the
// bytes download through REST and the CLI, the cache keys on the input's
// digest, bad outputs fail the step naming them, and another project
// sees nothing.
func TestArtifactsTrainEvaluate(t *testing.T) {
	s := newStack(t)
	checkArtifactsFlow(t, s, false)
}

// The same on a real S3 server (versitygw): the workers upload and
// download through the S3 API, and the gateway answers downloads with a
// 307 to a signed URL of the one object, which the client follows without
// its Atelier token.
func TestArtifactsOnS3(t *testing.T) {
	srv := s3test.Start(t)
	srv.Setenv(t) // gateway and worker run in this process
	s := newStack(t, stackOptions{artifactsURL: srv.URL("atelier/")})
	checkArtifactsFlow(t, s, true)
}

func checkArtifactsFlow(t *testing.T, s *stack, signed bool) {
	s.createPipeline("artifacts", artifactsPipeline)
	id := s.start("artifacts", nil)
	r := s.waitTerminal(id, 2*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))

	prep, train, eval := stepByName(r, "prepare"), stepByName(r, "train"), stepByName(r, "evaluate")
	require.Len(t, val(prep.Artifacts), 1)
	dataset := val(prep.Artifacts)[0]
	assert.Equal(t, "dataset", dataset.Type)
	assert.Equal(t, 2, val(dataset.Files))
	assert.Equal(t, int64(len("1,2\n3,4\n")), dataset.Size)
	require.Len(t, val(train.Inputs), 1)
	assert.Equal(t, dataset.Digest, val(train.Inputs)[0].Digest, "train read what prepare wrote")
	assert.Equal(t, "prepare.dataset", val(val(train.Inputs)[0].From))
	require.Len(t, val(train.Artifacts), 1)
	model := val(train.Artifacts)[0]
	assert.Equal(t, "model", model.Type)
	assert.Equal(t, model.Id, val(eval.Inputs)[0].Id)

	// Lineage: what the run wrote and read; what the model was made from
	// and who read it (recorded by the mirror: may lag the status).
	var ra gen.RunArtifacts
	require.Eventually(t, func() bool {
		code, body := s.raw("GET", s.path("/runs/%s/artifacts", id), nil)
		return code == 200 && json.Unmarshal(body, &ra) == nil && len(ra.Produced) == 2 && len(ra.Consumed) == 2
	}, 10*time.Second, 100*time.Millisecond, "lineage of run %s: %+v", id, ra)
	code, body := s.raw("GET", s.path("/artifacts/%s", model.Id), nil)
	require.Equal(t, 200, code, "%s", body)
	var lin gen.ArtifactLineage
	require.NoError(t, json.Unmarshal(body, &lin))
	assert.Equal(t, "train", lin.Artifact.Producer.Step)
	require.Len(t, lin.MadeFrom, 1)
	assert.Equal(t, dataset.Id, lin.MadeFrom[0].Artifact.Id)
	require.Len(t, lin.Consumers, 1)
	assert.Equal(t, "evaluate", lin.Consumers[0].Step)

	// Bytes: a file, a directory's listing and one of its files, the
	// redirect where the store signs URLs, a Range request through the
	// gateway otherwise.
	assert.Equal(t, "1,2\n3,4\n", s.download(model.Id, "", signed))
	code, body = s.raw("GET", s.path("/artifacts/%s/files", dataset.Id), nil)
	require.Equal(t, 200, code, "%s", body)
	assert.Contains(t, string(body), `"path":"train/a.csv"`)
	assert.Equal(t, "1,2\n", s.download(dataset.Id, "train/a.csv", signed))
	code, body = s.raw("GET", s.path("/artifacts/%s/content", dataset.Id), nil)
	assert.Equal(t, 400, code, "a directory needs a path: %s", body)
	code, _ = s.raw("GET", s.path("/artifacts/%s/content?path=nope.csv", dataset.Id), nil)
	assert.Equal(t, 404, code)
	req, _ := http.NewRequest("GET", s.url+s.path("/artifacts/%s/content?redirect=false", model.Id), nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Range", "bytes=4-6")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	part := make([]byte, 16)
	n, _ := res.Body.Read(part)
	res.Body.Close()
	assert.Equal(t, 206, res.StatusCode)
	assert.Equal(t, "3,4", string(part[:n]))

	// The CLI downloads a file and a whole directory.
	config := filepath.Join(t.TempDir(), "config.yaml")
	require.Equal(t, 0, atelierCLI(t, config, "login", s.url, "--token", s.token, "--project", s.project).code)
	out := t.TempDir()
	cr := atelierCLI(t, config, "artifacts", "get", dataset.Id, "--to", filepath.Join(out, "ds"))
	require.Equal(t, 0, cr.code, "%s", cr.stderr)
	b, err := os.ReadFile(filepath.Join(out, "ds", "train", "a.csv"))
	require.NoError(t, err)
	assert.Equal(t, "1,2\n", string(b))
	cr = atelierCLI(t, config, "artifacts", "ls", id)
	require.Equal(t, 0, cr.code, "%s", cr.stderr)
	assert.Contains(t, cr.stdout, model.Id)

	// The same input again: train is a cache hit and still hands its
	// model on; a changed dataset is a miss.
	again := s.waitTerminal(s.start("artifacts", nil), 2*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, again.State, "%s", val(again.Status.Error))
	assert.Equal(t, gen.StepStateCACHED, stepByName(again, "train").State)
	assert.Equal(t, model.Digest, val(stepByName(again, "train").Artifacts)[0].Digest)
	assert.Equal(t, model.Id, val(stepByName(again, "evaluate").Inputs)[0].Id, "evaluate read the cached model")
	changed := s.waitTerminal(s.start("artifacts", map[string]any{"rows": "9,9"}), 2*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, changed.State, "%s", val(changed.Status.Error))
	assert.Equal(t, gen.StepStateSUCCEEDED, stepByName(changed, "train").State, "a changed dataset is a cache miss")

	// Another project sees none of it, by ID or through the run.
	other := s.asProject("other-artifacts")
	for _, p := range []string{"/artifacts/%s", "/artifacts/%s/content", "/artifacts/%s/files"} {
		code, _ := other.raw("GET", fmt.Sprintf("/v1/projects/%s"+p, other.project, model.Id), nil)
		assert.Equal(t, 404, code, p)
		code, _ = other.raw("GET", fmt.Sprintf("/v1/projects/%s"+p, s.project, model.Id), nil)
		assert.Contains(t, []int{403, 404}, code, p)
	}
	code, _ = other.raw("GET", fmt.Sprintf("/v1/projects/%s/runs/%s/artifacts", other.project, id), nil)
	assert.Equal(t, 404, code)
}

// download reads an artifact's bytes through REST: following the signed
// URL (without the Atelier token) when signed, else streamed. A 404 is
// asked again for a few seconds: the artifact's record is written by the
// run's mirror a moment after GET reports the run's end (docs/ui.md).
func (s *stack) download(id, path string, signed bool) string {
	s.t.Helper()
	u := s.url + s.path("/artifacts/%s/content", id)
	if path != "" {
		u += "?path=" + path
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var res *http.Response
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", "Bearer "+s.token)
		var err error
		res, err = noFollow.Do(req)
		require.NoError(s.t, err)
		if res.StatusCode != http.StatusNotFound || time.Now().After(deadline) {
			break
		}
		res.Body.Close()
	}
	defer res.Body.Close()
	if signed {
		require.Equal(s.t, http.StatusTemporaryRedirect, res.StatusCode, "a store that signs URLs redirects")
		res2, err := http.Get(res.Header.Get("Location"))
		require.NoError(s.t, err)
		defer res2.Body.Close()
		res = res2
	}
	require.Equal(s.t, 200, res.StatusCode)
	b := make([]byte, 0, 64)
	buf := make([]byte, 4096)
	for {
		n, err := res.Body.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil {
			break
		}
	}
	return string(b)
}

// Bad artifacts: a spec error is a 422 with every problem's path; an
// output the step did not write, or a symbolic link to a file outside
// $ATELIER_ARTIFACTS, fails the step naming the output, and nothing of
// the outside file is stored.
func TestArtifactsBadInput(t *testing.T) {
	s := newStack(t)
	code, problems := s.push("bad-artifacts", `
steps:
  - name: a
    container:
      command: [sh, -c, "true"]
      artifacts:
        outputs: [{name: Model, path: ../x}, {name: ok, type: weights}]
  - name: b
    container:
      command: [sh, -c, "true"]
      artifacts:
        inputs: [{name: m, from: a.missing}, {name: other, from: nowhere}]
`)
	require.Equal(t, 422, code)
	for _, p := range []string{
		"steps[0].container.artifacts.outputs[0].name", "steps[0].container.artifacts.outputs[0].path",
		"steps[0].container.artifacts.outputs[1].type", "steps[1].container.artifacts.inputs[0].from",
		"steps[1].container.artifacts.inputs[1].from",
	} {
		assert.Contains(t, problems, p)
	}

	secret := filepath.Join(t.TempDir(), "outside.txt")
	require.NoError(t, os.WriteFile(secret, []byte("not an artifact"), 0o644))
	s.createPipeline("bad-outputs", fmt.Sprintf(`
steps:
  - name: forgets
    container:
      command: [sh, -c, "true"]
      artifacts:
        outputs: [{name: model, path: model.bin}]
  - name: links
    container:
      command: [sh, -c, 'ln -s %s "$ATELIER_ARTIFACTS/model.bin"']
      artifacts:
        outputs: [{name: model, path: model.bin}]
`, secret))
	r := s.waitTerminal(s.start("bad-outputs", nil), 2*time.Minute)
	require.Equal(t, gen.RunStateFAILED, r.State)
	assert.Contains(t, val(stepByName(r, "forgets").Error), `did not write its output artifact "model"`)
	assert.Contains(t, val(stepByName(r, "links").Error), `output artifact "model"`)
	assert.Contains(t, val(stepByName(r, "links").Error), "symbolic link")
	code, body := s.raw("GET", s.path("/runs/%s/artifacts", r.Id), nil)
	require.Equal(t, 200, code)
	assert.Contains(t, string(body), `"produced":[]`)
}

// Kill -9 the worker right after the step's process wrote a 400 MB output
// (while the worker hashes or uploads it to S3), then start another: the
// step completes (re-run by the next execution, not a failed attempt), the
// run's artifact has every byte, and every object the store holds hashes
// to its key: no partial upload sits under a final name.
func TestArtifactsWorkerKilledMidUpload(t *testing.T) {
	srv := s3test.Start(t)
	srv.Setenv(t)
	s := newStack(t, stackOptions{noWorker: true, artifactsURL: srv.URL("atelier/")})
	dir := stepScratchDir(t)
	const size = 400_000_000
	s.createPipeline("big-output", fmt.Sprintf(`
steps:
  - name: write
    container:
      command: [sh, -c, 'head -c %d /dev/urandom > "$ATELIER_ARTIFACTS/big.bin" && echo "$ATELIER_EXECUTION" >> %s/written']
      artifacts:
        outputs: [{name: big, path: big.bin, type: model}]
`, size, dir))
	id := s.start("big-output", nil)
	w := s.startWorkerProcess(t, "worker-1.log", srv.Env()...)
	waitFile(t, filepath.Join(dir, "written"), 2*time.Minute)
	time.Sleep(300 * time.Millisecond) // hashing or uploading now
	require.NoError(t, w.Process.Signal(syscall.SIGKILL))
	_ = w.Wait()
	t.Logf("worker killed; objects stored at the kill: %d", len(storedObjects(t, srv)))

	s.startWorkerProcess(t, "worker-2.log", srv.Env()...)
	r := s.waitTerminal(id, 3*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	st := stepByName(r, "write")
	assert.Len(t, val(st.Attempts), 1, "a lost worker is not a failed attempt")
	require.Len(t, val(st.Artifacts), 1)
	art := val(st.Artifacts)[0]
	assert.Equal(t, int64(size), art.Size)
	objects := storedObjects(t, srv)
	require.NotEmpty(t, objects)
	found := false
	for key, p := range objects {
		f, err := os.Open(p)
		require.NoError(t, err)
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		require.NoError(t, err)
		assert.Equal(t, key, hex.EncodeToString(h.Sum(nil)), "object %s holds other bytes than its name says", p)
		found = found || "sha256:"+key == art.Digest
	}
	assert.True(t, found, "the artifact %s is stored", art.Digest)
}

// storedObjects maps the hex digest each object of the S3 server's posix
// directory is stored under to its file.
func storedObjects(t *testing.T, srv *s3test.Server) map[string]string {
	t.Helper()
	out := map[string]string{}
	root := filepath.Join(srv.Dir, srv.Bucket)
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Base(filepath.Dir(p)) != "sha256" {
			return nil
		}
		out[filepath.Base(p)] = p
		return nil
	})
	return out
}

// The example a new user runs with `make dev` works as its comments say.
func TestArtifactsExamplePipeline(t *testing.T) {
	s := newStack(t)
	b, err := os.ReadFile("../examples/pipelines/train-with-artifacts.yaml")
	require.NoError(t, err)
	s.createPipeline("train-with-artifacts", string(b))
	id := s.start("train-with-artifacts", map[string]any{"rows": 10})
	r := s.waitTerminal(id, 2*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	// The artifact records are the mirror's: GET may report the end first.
	s.waitListed(id, gen.RunStateSUCCEEDED, 10*time.Second)
	arts := val(stepByName(r, "train").Artifacts)
	require.Len(t, arts, 2)
	assert.Equal(t, "metrics", arts[1].Type)
	var metrics map[string]any
	require.NoError(t, json.Unmarshal([]byte(s.download(arts[1].Id, "", false)), &metrics))
	assert.InDelta(t, 3.0, metrics["loss"], 0.0001) // mean of i*3%7 for i < 10: 30/10
	assert.Equal(t, 10.0, metrics["rows"])
	out, _ := stepByName(r, "evaluate").Outputs.(map[string]any)
	assert.InDelta(t, 2.0, out["error"], 0.0001) // |3 - 1|
}

// The operator's per-project limit: outputs that would take the project
// past it fail the step naming the limit, and nothing of them is
// recorded; outputs within it are stored.
func TestArtifactsProjectLimit(t *testing.T) {
	s := newStack(t, stackOptions{artifactLimit: 3000})
	s.createPipeline("limited", `
params:
  - {name: bytes, type: integer}
steps:
  - name: write
    container:
      command: [sh, -c, 'head -c "$SIZE" /dev/urandom > "$ATELIER_ARTIFACTS/out.bin"']
      env: {SIZE: "{{ params.bytes }}"}
      artifacts:
        outputs: [{name: out, path: out.bin}]
`)
	r := s.waitTerminal(s.start("limited", map[string]any{"bytes": 2000}), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	r = s.waitTerminal(s.start("limited", map[string]any{"bytes": 2000}), time.Minute)
	require.Equal(t, gen.RunStateFAILED, r.State)
	msg := val(stepByName(r, "write").Error)
	assert.Contains(t, msg, "over the limit of 2.9 KiB per project")
	assert.Contains(t, msg, "ATELIER_ARTIFACTS_PROJECT_LIMIT")
	assert.Empty(t, val(stepByName(r, "write").Artifacts))
}

// Fan-in: a step reads the artifact of every item of a forEach step, each
// under its index ($ATELIER_INPUTS/<name>/<i>), and each item is a use in
// lineage; a forEach item also reads a plain step's artifact.
func TestArtifactsFanIn(t *testing.T) {
	s := newStack(t)
	s.createPipeline("fan-in", `
steps:
  - name: base
    container:
      command: [sh, -c, 'printf 10 > "$ATELIER_ARTIFACTS/base"']
      artifacts:
        outputs: [{name: base}]
  - name: shard
    forEach: {items: [1, 2, 3]}
    container:
      command: [sh, -c, 'echo $(( $(cat "$ATELIER_INPUTS/base") * {{ item }} )) > "$ATELIER_ARTIFACTS/part"']
      artifacts:
        inputs: [{name: base, from: base.base}]
        outputs: [{name: part}]
  - name: merge
    container:
      command: [sh, -c, 'printf "{\"sum\": %s, \"files\": \"%s\"}" $(( $(cat "$ATELIER_INPUTS/parts/0") + $(cat "$ATELIER_INPUTS/parts/1") + $(cat "$ATELIER_INPUTS/parts/2") )) "$(ls "$ATELIER_INPUTS/parts" | tr "\n" " ")" > "$ATELIER_OUTPUTS"']
      artifacts:
        inputs: [{name: parts, from: shard.part}]
`)
	id := s.start("fan-in", nil)
	r := s.waitTerminal(id, 2*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	assert.Equal(t, map[string]any{"sum": 60.0, "files": "0 1 2 "}, stepByName(r, "merge").Outputs)
	ins := val(stepByName(r, "merge").Inputs)
	require.Len(t, ins, 3)
	assert.Equal(t, "parts/2", ins[2].Name)
	assert.Equal(t, "shard[2].part", val(ins[2].From))
	assert.Equal(t, 2, val(ins[2].Producer.Item))
	var ra gen.RunArtifacts
	require.Eventually(t, func() bool {
		code, body := s.raw("GET", s.path("/runs/%s/artifacts", id), nil)
		return code == 200 && json.Unmarshal(body, &ra) == nil && len(ra.Produced) == 4 && len(ra.Consumed) == 6
	}, 10*time.Second, 100*time.Millisecond, "1 base + 3 parts written; 3 items read base, merge read 3 parts: %+v", ra)
}
