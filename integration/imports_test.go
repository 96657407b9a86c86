package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/stack/s3test"
)

// importsPipeline reads a dataset directory and a file from outside the
// artifact store: a prefix of an S3 bucket and an HTTP server.
const importsPipeline = `
params:
  - {name: data, type: string}
  - {name: vocab, type: string}
steps:
  - name: train
    cache: {}
    container:
      command: [sh, -c, 'cat "$ATELIER_INPUTS/data/a.csv" "$ATELIER_INPUTS/data/sub/b.csv" "$ATELIER_INPUTS/vocab" > "$ATELIER_ARTIFACTS/model.bin"']
      artifacts:
        inputs:
          - {name: data, uri: "{{ params.data }}"}
          - {name: vocab, uri: "{{ params.vocab }}"}
        outputs: [{name: model, path: model.bin, type: model}]
`

// Inputs imported from URIs on the real stack, the artifacts on a real
// S3 server (versitygw): a directory under an S3 prefix and a file over
// HTTP reach the step, are stored by content (their digests in the
// step's inputs and cache key: the same bytes again are a cache hit,
// read from nowhere when the sources' fingerprints did not change; a
// changed object is a miss), recorded as the run's imports with their
// source, and what the operator does not allow the project, or what is
// absent, fails the step naming it. With ATELIER_RECORD_HISTORIES=1 it
// records v14-artifact-imports.
func TestImportedInputsOnS3(t *testing.T) {
	srv := s3test.Start(t)
	srv.Setenv(t) // gateway and worker run in this process
	var vocab atomic.Value
	vocab.Store("v1\n")
	var bodies atomic.Int32 // answers that sent the vocabulary's bytes
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/vocab.txt":
			v := vocab.Load().(string)
			etag := fmt.Sprintf("%q", strings.TrimSpace(v))
			w.Header().Set("ETag", etag)
			if r.Header.Get("If-None-Match") == etag {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			bodies.Add(1)
			_, _ = w.Write([]byte(v))
		case "/elsewhere":
			http.Redirect(w, r, "http://127.0.0.2:1/vocab.txt", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(web.Close)

	ctx := context.Background()
	b, err := blob.OpenBucket(ctx, srv.URL(""))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	put := func(key, content string) {
		require.NoError(t, b.WriteAll(ctx, key, []byte(content), nil))
	}
	put("datasets/train/a.csv", "1,2\n")
	put("datasets/train/sub/b.csv", "3,4\n")
	put("private/secret.csv", "no\n")

	q, err := url.ParseQuery(strings.SplitN(srv.URL(""), "?", 2)[1])
	require.NoError(t, err)
	bucket := "s3://" + srv.Bucket
	s := newStack(t, stackOptions{
		artifactsURL: srv.URL("atelier/"),
		artifactsImport: strings.Join([]string{
			bucket + "/datasets/?" + q.Encode(),
			web.URL + "/",
			"team-b=" + bucket + "/private/?" + q.Encode(),
		}, ","),
	})
	code, problems := s.push("imports", importsPipeline)
	require.Equal(t, 201, code, "%v", problems)
	params := map[string]any{"data": bucket + "/datasets/train/", "vocab": web.URL + "/vocab.txt"}

	id := s.start("imports", params)
	r := s.waitTerminal(id, 2*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	train := stepByName(r, "train")
	inputs := map[string]gen.Artifact{}
	for _, a := range val(train.Inputs) {
		inputs[a.Name] = a
	}
	require.Len(t, inputs, 2)
	data, voc := inputs["data"], inputs["vocab"]
	assert.Equal(t, "uri:"+bucket+"/datasets/train/", val(data.From))
	assert.Equal(t, bucket+"/datasets/train/", val(data.Source))
	assert.Equal(t, "dataset", data.Type)
	assert.Equal(t, 2, val(data.Files))
	assert.Equal(t, int64(8), data.Size)
	assert.Equal(t, id, data.Producer.Run)
	assert.Equal(t, "train", data.Producer.Step)
	assert.Equal(t, 0, data.Producer.Attempt, "imported before any attempt")
	assert.Equal(t, "file", voc.Type)
	assert.Equal(t, int64(3), voc.Size)
	model := val(train.Artifacts)[0]
	assert.Equal(t, "1,2\n3,4\nv1\n", s.download(model.Id, "", true), "the step read both imports")
	assert.Equal(t, "v1\n", s.download(voc.Id, "", true))

	// Lineage: the imports are the run's artifacts, with their source;
	// the model was made from them.
	var lin gen.ArtifactLineage
	require.Eventually(t, func() bool {
		code, body := s.raw("GET", s.path("/artifacts/%s", model.Id), nil)
		return code == 200 && json.Unmarshal(body, &lin) == nil && len(lin.MadeFrom) == 2
	}, 10*time.Second, 100*time.Millisecond, "lineage of %s: %+v", model.Id, lin)
	sources := map[string]string{}
	for _, m := range lin.MadeFrom {
		sources[m.Use.Input] = val(m.Artifact.Source)
	}
	assert.Equal(t, map[string]string{"data": bucket + "/datasets/train/", "vocab": web.URL + "/vocab.txt"}, sources)
	code, body := s.raw("GET", s.path("/artifacts/%s", data.Id), nil)
	require.Equal(t, 200, code, "%s", body)
	require.NoError(t, json.Unmarshal(body, &lin))
	assert.Equal(t, bucket+"/datasets/train/", val(lin.Artifact.Source))
	assert.Equal(t, 0, lin.Artifact.Producer.Attempt)

	if os.Getenv("ATELIER_RECORD_HISTORIES") != "" {
		// Guards what a run that imports its inputs replays as.
		recordHistory(t, s, "v14-artifact-imports", id)
	}

	// The same bytes again: a cache hit (the key holds the digests), and
	// the unchanged sources are not read again (the HTTP server answered
	// 304 to the remembered ETag; the S3 prefix's listing is the same).
	require.Equal(t, int32(1), bodies.Load())
	again := s.waitTerminal(s.start("imports", params), 2*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, again.State, "%s", val(again.Status.Error))
	assert.Equal(t, gen.StepStateCACHED, stepByName(again, "train").State)
	assert.Equal(t, int32(1), bodies.Load(), "the unchanged file was not sent again")
	assert.Equal(t, data.Digest, val(stepByName(again, "train").Inputs)[0].Digest)
	// A changed file: a miss.
	vocab.Store("v2\n")
	changed := s.waitTerminal(s.start("imports", params), 2*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, changed.State, "%s", val(changed.Status.Error))
	assert.Equal(t, gen.StepStateSUCCEEDED, stepByName(changed, "train").State, "a changed input is a cache miss")
	assert.NotEqual(t, voc.Digest, val(stepByName(changed, "train").Inputs)[1].Digest)
	assert.Equal(t, int32(2), bodies.Load())
	// A changed object under the S3 prefix: a miss too.
	put("datasets/train/sub/b.csv", "5,6\n")
	changed = s.waitTerminal(s.start("imports", params), 2*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, changed.State, "%s", val(changed.Status.Error))
	assert.Equal(t, gen.StepStateSUCCEEDED, stepByName(changed, "train").State)
	assert.NotEqual(t, data.Digest, val(stepByName(changed, "train").Inputs)[0].Digest)
	model = val(stepByName(changed, "train").Artifacts)[0]
	assert.Equal(t, "1,2\n5,6\nv2\n", s.download(model.Id, "", true))

	// What the step cannot import fails it, naming why.
	for name, tc := range map[string]struct {
		params map[string]any
		want   string
	}{
		"another project's prefix": {
			map[string]any{"data": bucket + "/private/", "vocab": web.URL + "/vocab.txt"},
			`input artifact "data": project team-a may not import from ` + bucket + `/private/: the operator allows it only ` + bucket + `/datasets/, ` + web.URL + `/ (--artifacts-import)`,
		},
		"an absent object": {
			map[string]any{"data": bucket + "/datasets/train/", "vocab": web.URL + "/missing.txt"},
			`input artifact "vocab": GET ` + web.URL + `/missing.txt answered 404 Not Found`,
		},
		"an empty prefix": {
			map[string]any{"data": bucket + "/datasets/none/", "vocab": web.URL + "/vocab.txt"},
			`input artifact "data": ` + bucket + `/datasets/none/ holds no object`,
		},
		"a redirect out of the allowed prefixes": {
			map[string]any{"data": bucket + "/datasets/train/", "vocab": web.URL + "/elsewhere"},
			`input artifact "vocab": redirected to http://127.0.0.2:1/vocab.txt, which project team-a may not import from`,
		},
		"a URI with a query": {
			map[string]any{"data": bucket + "/datasets/train/?region=x", "vocab": web.URL + "/vocab.txt"},
			`must have no query or fragment`,
		},
	} {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			r := s.waitTerminal(s.start("imports", tc.params), 2*time.Minute)
			require.Equal(t, gen.RunStateFAILED, r.State)
			assert.Contains(t, val(stepByName(r, "train").Error), tc.want)
		})
	}

	// A literal URI that is not one is a 422 when the pipeline is stored.
	code, problems = s.push("bad-uri", `
steps:
  - {name: a, container: {command: ["true"], artifacts: {inputs: [{name: d, uri: "ftp://host/x"}]}}}
`)
	require.Equal(t, 422, code)
	assert.Contains(t, problems["steps[0].container.artifacts.inputs[0].uri"], "the scheme must be one of s3, https, http")
}
