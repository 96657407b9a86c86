package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"strings"
	"testing"
)

func testImage() Image {
	return Image{
		Ref: "localhost/test/hello:v1",
		Files: []File{
			{Path: "/usr/bin/hello", Mode: 0o755, Data: []byte("#!/bin/sh\necho hello\n")},
			Symlink("/bin/hi", "/usr/bin/hello"),
			Dir("/tmp", 0o1777),
			{Path: "etc/motd", Data: []byte("hi\n")},
		},
		Entrypoint: []string{"/usr/bin/hello"},
	}
}

// readTar returns the entries of a tar by name.
func readTar(t *testing.T, b []byte) (names []string, hdrs map[string]*tar.Header, data map[string][]byte) {
	t.Helper()
	hdrs, data = map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names, hdrs, data
		}
		if err != nil {
			t.Fatal(err)
		}
		d, _ := io.ReadAll(tr)
		names = append(names, h.Name)
		hdrs[h.Name], data[h.Name] = h, d
	}
}

func TestWriteIsReproducibleAndImportable(t *testing.T) {
	var a, b bytes.Buffer
	ba, err := testImage().Write(&a)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := testImage().Write(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) || ba != bb {
		t.Fatal("two builds of one image differ")
	}

	_, _, files := readTar(t, a.Bytes())
	var index struct {
		Manifests []struct {
			Digest      string
			Annotations map[string]string
		}
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 || index.Manifests[0].Digest != ba.Digest {
		t.Fatalf("index.json: %s", files["index.json"])
	}
	if got := index.Manifests[0].Annotations[annotationImageName]; got != "localhost/test/hello:v1" {
		t.Errorf("image name annotation = %q", got)
	}
	if got := index.Manifests[0].Annotations[annotationRefName]; got != "v1" {
		t.Errorf("ref name annotation = %q", got)
	}
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %s", files["oci-layout"])
	}
	var docker []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &docker); err != nil {
		t.Fatal(err)
	}
	if len(docker) != 1 || docker[0].RepoTags[0] != "localhost/test/hello:v1" || files[docker[0].Config] == nil || files[docker[0].Layers[0]] == nil {
		t.Fatalf("manifest.json: %s", files["manifest.json"])
	}
	if "sha256:"+strings.TrimPrefix(docker[0].Config, "blobs/sha256/") != ba.ConfigDigest {
		t.Errorf("config digest %s, manifest.json names %s", ba.ConfigDigest, docker[0].Config)
	}
	// Every blob is stored under its digest.
	for name, d := range files {
		if strings.HasPrefix(name, "blobs/sha256/") && len(d) > 0 && digest(d) != "sha256:"+strings.TrimPrefix(name, "blobs/sha256/") {
			t.Errorf("%s does not hash to its name", name)
		}
	}

	// The layer: parents before children, root-owned, fixed times.
	names, hdrs, data := readTar(t, files[docker[0].Layers[0]])
	want := []string{"bin/", "bin/hi", "etc/", "etc/motd", "tmp/", "usr/", "usr/bin/", "usr/bin/hello"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("layer entries %v, want %v", names, want)
	}
	if h := hdrs["bin/hi"]; h.Typeflag != tar.TypeSymlink || h.Linkname != "/usr/bin/hello" {
		t.Errorf("bin/hi: %+v", h)
	}
	if h := hdrs["tmp/"]; h.Mode != 0o1777 {
		t.Errorf("tmp mode %o", h.Mode)
	}
	if h := hdrs["usr/bin/hello"]; h.Mode != 0o755 || string(data["usr/bin/hello"]) != "#!/bin/sh\necho hello\n" {
		t.Errorf("hello: mode %o", h.Mode)
	}
	if h := hdrs["etc/motd"]; h.Mode != 0o644 {
		t.Errorf("motd mode %o", h.Mode)
	}
	for n, h := range hdrs {
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(Epoch) {
			t.Errorf("%s: uid %d gid %d mtime %s", n, h.Uid, h.Gid, h.ModTime)
		}
	}
}

func TestWriteRefusesDuplicatesAndNoRef(t *testing.T) {
	img := testImage()
	img.Files = append(img.Files, File{Path: "/etc/motd/"})
	if _, err := img.Write(io.Discard); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate path: %v", err)
	}
	if _, err := (Image{}).Write(io.Discard); err == nil {
		t.Error("an image without a Ref was written")
	}
}

func TestModeBits(t *testing.T) {
	h := header("x", tar.TypeDir, fs.ModeSticky|0o777, 0)
	if h.Mode != 0o1777 {
		t.Errorf("mode %o", h.Mode)
	}
}
