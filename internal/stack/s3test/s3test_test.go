package s3test_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob"

	"github.com/atelier-ml/atelier/internal/stack/s3test"
)

// TestBlobThroughS3 drives the server the way Atelier's code does: through
// gocloud.dev/blob's s3blob URL, and presigned URLs fetched with plain HTTP.
func TestBlobThroughS3(t *testing.T) {
	s := s3test.Start(t)
	s.Setenv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	b, err := blob.OpenBucket(ctx, s.URL("runs/"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	want := []byte("hello, s3\n")
	if err := b.WriteAll(ctx, "r1/out.txt", want, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := b.ReadAll(ctx, "r1/out.txt"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadAll = %q, %v; want %q", got, err, want)
	}
	// The posix backend stores the object as a file under the prefix.
	if got, err := os.ReadFile(filepath.Join(s.Dir, s.Bucket, "runs", "r1", "out.txt")); err != nil || !bytes.Equal(got, want) {
		t.Errorf("file in the bucket's directory = %q, %v", got, err)
	}

	objs, _, err := b.ListPage(ctx, blob.FirstPageToken, 10, &blob.ListOptions{Prefix: "r1/"})
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].Key != "r1/out.txt" || objs[0].Size != int64(len(want)) {
		t.Errorf("list r1/: %+v", objs)
	}

	get, err := b.SignedURL(ctx, "r1/out.txt", &blob.SignedURLOptions{Expiry: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if got := do(t, http.MethodGet, get, nil); !bytes.Equal(got, want) {
		t.Errorf("GET signed URL = %q, want %q", got, want)
	}

	put, err := b.SignedURL(ctx, "r1/up.bin", &blob.SignedURLOptions{Method: http.MethodPut, Expiry: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	up := []byte{0, 1, 2, 0xff}
	do(t, http.MethodPut, put, up)
	if got, err := b.ReadAll(ctx, "r1/up.bin"); err != nil || !bytes.Equal(got, up) {
		t.Errorf("after PUT to a signed URL: %q, %v; want %q", got, err, up)
	}
}

// do sends one request and returns the body of a 200 answer.
func do(t *testing.T, method, url string, body []byte) []byte {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s signed URL: %s %v\n%s", method, resp.Status, err, got)
	}
	return got
}
