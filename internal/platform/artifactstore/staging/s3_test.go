package staging_test

import (
	"context"
	"testing"

	"gocloud.dev/blob"

	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore/staging"
	"github.com/atelier-ml/atelier/internal/stack/s3test"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// On a real S3 server (versitygw), the artifact store and the staging
// store sharing its bucket under two prefixes: keys under the staging
// URL's prefix are where the pods' URIs say, an S3 "directory marker"
// (a key ending in '/', which S3 consoles and Hadoop write) is not a
// file, and Remove leaves the artifact store alone. (An output written
// both as an object and under it, which S3 allows and Ingest refuses,
// cannot be made on versitygw's posix backend.)
func TestStagingOnS3(t *testing.T) {
	srv := s3test.Start(t)
	srv.Setenv(t)
	ctx := context.Background()
	arts, err := artifactstore.Open(ctx, srv.URL("atelier/"))
	if err != nil {
		t.Fatal(err)
	}
	defer arts.Close()
	st, err := staging.Open(ctx, srv.URL("staging/"), "s3://"+srv.Bucket+"/staging")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pods, err := blob.OpenBucket(ctx, srv.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer pods.Close()

	data := storeFiles(t, arts, "p", map[string]string{"a.csv": "1\n", "d/b.csv": "2\n"})
	a, err := st.Attempt("p", "r", "train", nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Stage(ctx, arts, "p", []runstate.Artifact{{Name: "data", Digest: data.Digest, Size: data.Size, Files: data.Files}}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, pods, "staging/p/r/train/1/inputs/data/d/b.csv"); got != "2\n" {
		t.Errorf("staged %q", got)
	}
	for k, v := range map[string]string{
		"outputs/ckpt/": "", "outputs/ckpt/w.bin": "w",
	} {
		if err := pods.WriteAll(ctx, "staging/p/r/train/1/"+k, []byte(v), nil); err != nil {
			t.Fatal(err)
		}
	}
	got, err := a.Ingest(ctx, arts.Objects("p"), []pipeline.ArtifactOutput{{Name: "ckpt"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := storeFiles(t, arts, "p", map[string]string{"w.bin": "w"}); got[0] != want {
		t.Errorf("checkpoint %+v, want %+v (its one file; the marker is none)", got[0], want)
	}
	if err := a.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if left := listAll(t, pods); len(left) == 0 {
		t.Error("Remove emptied the artifact store too")
	} else {
		for _, k := range left {
			if len(k) >= 8 && k[:8] == "staging/" {
				t.Errorf("%s left after Remove", k)
			}
		}
	}
	if ok, err := arts.Exists(ctx, "p", got[0].Digest); err != nil || !ok {
		t.Errorf("the stored checkpoint is gone: %v", err)
	}
}
