package staging_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob"

	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore/staging"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// storeFiles stores files (path → content) as a directory artifact of
// project p, or one file when files has the single path ".".
func storeFiles(t *testing.T, arts *artifactstore.Store, p string, files map[string]string) artifactstore.Object {
	t.Helper()
	dir := t.TempDir()
	for name, c := range files {
		full := filepath.Join(dir, "a", filepath.FromSlash(name))
		if name == "." {
			full = filepath.Join(dir, "a")
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	o, err := arts.PutPath(context.Background(), p, root, "a")
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func read(t *testing.T, b *blob.Bucket, key string) string {
	t.Helper()
	got, err := b.ReadAll(context.Background(), key)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return string(got)
}

// The whole round: inputs staged as the job reads them, the job's
// outputs stored by content (a directory with the digest a container's
// identical directory has), missing and ambiguous outputs named, the
// attempt's part removed, leftovers swept by age.
func TestStageIngestRemove(t *testing.T) {
	ctx := context.Background()
	arts, err := artifactstore.Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st, err := staging.Open(ctx, "file://"+dir, "s3://bucket/atelier-staging/")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// The pods' view of the same place, which the test plays.
	pods, err := blob.OpenBucket(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer pods.Close()

	data := storeFiles(t, arts, "p", map[string]string{"train.csv": "x,y\n", "sub/val.csv": "1,2\n"})
	cfg := storeFiles(t, arts, "p", map[string]string{".": "lr: 0.1\n"})
	item := 3
	a, err := st.Attempt("p", "r1", "train", &item, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a.InputsURI(), "s3://bucket/atelier-staging/p/r1/train/3/2/inputs"; got != want {
		t.Errorf("InputsURI = %s, want %s", got, want)
	}
	if got, want := a.OutputsURI(), "s3://bucket/atelier-staging/p/r1/train/3/2/outputs"; got != want {
		t.Errorf("OutputsURI = %s, want %s", got, want)
	}
	inputs := []runstate.Artifact{
		{Name: "data", Digest: data.Digest, Size: data.Size, Files: data.Files},
		{Name: "config", Digest: cfg.Digest, Size: cfg.Size},
	}
	if err := a.Stage(ctx, arts, "p", inputs); err != nil {
		t.Fatal(err)
	}
	base := "p/r1/train/3/2/"
	if got := read(t, pods, base+"inputs/data/sub/val.csv"); got != "1,2\n" {
		t.Errorf("staged directory file = %q", got)
	}
	if got := read(t, pods, base+"inputs/config"); got != "lr: 0.1\n" {
		t.Errorf("staged file = %q", got)
	}
	// Again (a retried activity): nothing breaks, nothing doubles.
	if err := a.Stage(ctx, arts, "p", inputs); err != nil {
		t.Fatal(err)
	}

	// The job writes a directory (as a container would) and a file. (S3's
	// "directory markers" are on versitygw: s3_test.go.)
	for k, v := range map[string]string{
		"outputs/ckpt/final/weights.bin": "w", "outputs/ckpt/final/meta/info.json": "{}", "outputs/report.txt": "ok",
	} {
		if err := pods.WriteAll(ctx, base+k, []byte(v), nil); err != nil {
			t.Fatal(err)
		}
	}
	got, err := a.Ingest(ctx, arts.Objects("p"), []pipeline.ArtifactOutput{{Name: "model", Path: "ckpt/final"}, {Name: "report.txt"}})
	if err != nil {
		t.Fatal(err)
	}
	want := storeFiles(t, arts, "p", map[string]string{"weights.bin": "w", "meta/info.json": "{}"})
	if got[0] != want {
		t.Errorf("directory output %+v, want %+v (the same files from a disk)", got[0], want)
	}
	if got[1].Files != 0 || got[1].Size != 2 {
		t.Errorf("file output %+v", got[1])
	}
	r, err := arts.Reader(ctx, "p", got[1].Digest)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	if string(b) != "ok" {
		t.Errorf("stored file = %q", b)
	}

	_, err = a.Ingest(ctx, arts.Objects("p"), []pipeline.ArtifactOutput{{Name: "metrics"}})
	var missing *staging.MissingError
	if !errors.As(err, &missing) || !strings.Contains(err.Error(), "s3://bucket/atelier-staging/p/r1/train/3/2/outputs/metrics") {
		t.Errorf("missing output: %v", err)
	}
	other, err := st.Attempt("p", "r1", "train", &item, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Stage(ctx, arts, "p", inputs[1:]); err != nil {
		t.Fatal(err)
	}
	if err := a.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	left := listAll(t, pods)
	if len(left) != 1 || left[0] != "p/r1/train/3/3/inputs/config" {
		t.Errorf("after Remove: %v, want the other attempt's only", left)
	}
	if n, err := st.Sweep(ctx, time.Hour); err != nil || n != 0 {
		t.Errorf("Sweep of young objects: %d, %v", n, err)
	}
	// What is not laid out as an attempt's part is never swept, however
	// old (a staging URL naming a shared prefix must not lose its other
	// objects).
	for _, k := range []string{"p/sha256/0123", "notes.txt", "p/r1/train/3/inputs"} {
		if err := pods.WriteAll(ctx, k, []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := st.Sweep(ctx, -time.Minute); err != nil || n != 1 {
		t.Errorf("Sweep of old objects: %d, %v; left %v", n, err, listAll(t, pods))
	}
	if left := listAll(t, pods); len(left) != 3 {
		t.Errorf("after Sweep: %v, want only what is not an attempt's", left)
	}

	for _, bad := range [][3]string{{"", "r", "s"}, {"p", "a/b", "s"}, {"p", "r", ".."}} {
		if _, err := st.Attempt(bad[0], bad[1], bad[2], nil, 1); err == nil {
			t.Errorf("Attempt%v: no error", bad)
		}
	}
	if _, err := staging.Open(ctx, "mem://", "bucket/prefix"); err == nil {
		t.Error("a staging URI without a scheme opened")
	}
	for _, urls := range [][2]string{
		{"s3://lake?region=x", "s3://lake/atelier-staging"},                         // the bucket's root
		{"s3://lake?region=x&prefix=other/", "s3://lake/atelier-staging"},           // another prefix
		{"s3://pond?region=x&prefix=atelier-staging/", "s3://lake/atelier-staging"}, // another bucket
		{"s3://lake?region=x&prefix=", "s3://lake"},                                 // no prefix at all
	} {
		if _, err := staging.Open(ctx, urls[0], urls[1]); err == nil || !strings.Contains(err.Error(), "same prefix of one bucket") {
			t.Errorf("Open(%q, %q): %v, want a refusal", urls[0], urls[1], err)
		}
	}
}

func listAll(t *testing.T, b *blob.Bucket) []string {
	t.Helper()
	var keys []string
	it := b.List(nil)
	for {
		o, err := it.Next(context.Background())
		if err == io.EOF {
			return keys
		}
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, o.Key)
	}
}
