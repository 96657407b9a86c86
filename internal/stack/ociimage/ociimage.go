// Package ociimage builds container images from files, without Docker or a
// registry: an Image (files, entrypoint, environment) is written as one
// uncompressed layer into an OCI image layout tar (oci-layout, index.json,
// blobs/sha256/...) that also carries Docker's manifest.json, so both
// `ctr images import` and `docker load` take it.
//
// The output is reproducible: the same Image gives the same bytes, hence the
// same image digest (entries sorted, owner root, fixed times, no host
// metadata). Parent directories are added as needed.
//
// The real node of internal/stack/kubetest (RealNode) imports its images
// this way: a pause image for the pod sandboxes and a busybox step image,
// used with imagePullPolicy: Never.
package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Epoch is the modification time of every file in an image and its
// creation time: fixed, so that builds are reproducible.
var Epoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// File is one entry of an image's filesystem.
type File struct {
	// Path is the absolute path in the image ("/bin/sh").
	Path string
	// Mode holds the permission bits (0 means 0644 for a file, 0755 for a
	// directory) and, for a directory, fs.ModeDir. The set-user-ID,
	// set-group-ID and sticky bits may be given either as fs.ModeSetuid,
	// fs.ModeSetgid and fs.ModeSticky or in chmod's octal (0o1777).
	Mode fs.FileMode
	// Data is a regular file's content.
	Data []byte
	// Link, when set, makes the entry a symbolic link to Link.
	Link string
}

// Dir returns a directory entry.
func Dir(p string, perm fs.FileMode) File { return File{Path: p, Mode: fs.ModeDir | perm} }

// Symlink returns a symbolic link at p pointing to target.
func Symlink(p, target string) File { return File{Path: p, Link: target} }

// Image is an image to build.
type Image struct {
	// Ref names the image, fully qualified so that no runtime rewrites it
	// (e.g. "localhost/atelier/step:busybox"): containerd's CRI would turn
	// "step:busybox" into "docker.io/library/step:busybox".
	Ref        string
	Files      []File
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	// Architecture defaults to the machine's (runtime.GOARCH).
	Architecture string
}

// Media types of the OCI image spec.
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
	// annotationImageName is the full reference containerd names an
	// imported image by; annotationRefName is the OCI layout's tag.
	annotationImageName = "io.containerd.image.name"
	annotationRefName   = "org.opencontainers.image.ref.name"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// Built is the result of Write.
type Built struct {
	// Digest is the manifest's digest ("sha256:..."), the image's identity
	// in containerd (what `ctr images ls` shows as DIGEST).
	Digest string
	// ConfigDigest is the config's digest: the image ID kubelet and
	// `crictl images` show.
	ConfigDigest string
	// Size is the size of the layer, uncompressed.
	Size int64
}

// Write writes img as an OCI image layout tar (with Docker's manifest.json)
// to w.
func (img Image) Write(w io.Writer) (Built, error) {
	if img.Ref == "" {
		return Built{}, fmt.Errorf("ociimage: image has no Ref")
	}
	layer, err := img.layer()
	if err != nil {
		return Built{}, err
	}
	layerDigest := digest(layer)
	arch := img.Architecture
	if arch == "" {
		arch = runtime.GOARCH
	}
	env := img.Env
	if env == nil {
		env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	config, err := json.Marshal(map[string]any{
		"architecture": arch,
		"os":           "linux",
		"created":      Epoch.Format(time.RFC3339),
		"config": map[string]any{
			"Env":        env,
			"Entrypoint": img.Entrypoint,
			"Cmd":        img.Cmd,
			"WorkingDir": img.WorkingDir,
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
		"history": []map[string]any{{"created": Epoch.Format(time.RFC3339), "created_by": "atelier ociimage"}},
	})
	if err != nil {
		return Built{}, err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeManifest,
		"config":        descriptor{MediaType: mediaTypeConfig, Digest: digest(config), Size: int64(len(config))},
		"layers":        []descriptor{{MediaType: mediaTypeLayer, Digest: layerDigest, Size: int64(len(layer))}},
	})
	if err != nil {
		return Built{}, err
	}
	tag := img.Ref
	if i := strings.LastIndex(tag, ":"); i > strings.LastIndex(tag, "/") {
		tag = tag[i+1:]
	} else {
		tag = "latest"
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeIndex,
		"manifests": []descriptor{{
			MediaType: mediaTypeManifest, Digest: digest(manifest), Size: int64(len(manifest)),
			Annotations: map[string]string{annotationImageName: img.Ref, annotationRefName: tag},
			Platform:    &platform{Architecture: arch, OS: "linux"},
		}},
	})
	if err != nil {
		return Built{}, err
	}
	dockerManifest, err := json.Marshal([]map[string]any{{
		"Config":   blobPath(digest(config)),
		"RepoTags": []string{img.Ref},
		"Layers":   []string{blobPath(layerDigest)},
	}})
	if err != nil {
		return Built{}, err
	}

	tw := tar.NewWriter(w)
	entries := []struct {
		name string
		data []byte
	}{
		{"blobs/sha256/" + hexOf(digest(config)), config},
		{"blobs/sha256/" + hexOf(layerDigest), layer},
		{"blobs/sha256/" + hexOf(digest(manifest)), manifest},
		{"index.json", index},
		{"manifest.json", dockerManifest},
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
	}
	slices.SortFunc(entries, func(a, b struct {
		name string
		data []byte
	}) int {
		return strings.Compare(a.name, b.name)
	})
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(header(d, tar.TypeDir, 0o755, 0)); err != nil {
			return Built{}, err
		}
	}
	for _, e := range entries {
		if err := tw.WriteHeader(header(e.name, tar.TypeReg, 0o644, int64(len(e.data)))); err != nil {
			return Built{}, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return Built{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return Built{}, err
	}
	return Built{Digest: digest(manifest), ConfigDigest: digest(config), Size: int64(len(layer))}, nil
}

// layer returns the image's filesystem as one tar, entries sorted by path
// with their parent directories first.
func (img Image) layer() ([]byte, error) {
	byPath := map[string]File{}
	for _, f := range img.Files {
		p := path.Clean("/" + f.Path)
		if p == "/" {
			return nil, fmt.Errorf("ociimage %s: a file cannot be the root directory", img.Ref)
		}
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("ociimage %s: %s is given twice", img.Ref, p)
		}
		f.Path = p
		byPath[p] = f
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = Dir(d, 0o755)
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p, f := range byPath {
		if f.Mode.IsDir() && f.Link == "" {
			paths = append(paths, p+"/") // "a/" sorts before "a/b", and "a-b" after: parents first either way
		} else {
			paths = append(paths, p)
		}
	}
	slices.SortFunc(paths, func(a, b string) int { return strings.Compare(strings.TrimSuffix(a, "/"), strings.TrimSuffix(b, "/")) })

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := byPath[strings.TrimSuffix(p, "/")]
		name := strings.TrimPrefix(p, "/")
		perm := f.Mode.Perm() | f.Mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)
		for octal, bit := range map[fs.FileMode]fs.FileMode{0o4000: fs.ModeSetuid, 0o2000: fs.ModeSetgid, 0o1000: fs.ModeSticky} {
			if f.Mode&octal != 0 {
				perm |= bit
			}
		}
		var h *tar.Header
		switch {
		case f.Link != "":
			h = header(name, tar.TypeSymlink, 0o777, 0)
			h.Linkname = f.Link
		case f.Mode.IsDir():
			if perm == 0 {
				perm = 0o755
			}
			h = header(name, tar.TypeDir, perm, 0)
		default:
			if perm == 0 {
				perm = 0o644
			}
			h = header(name, tar.TypeReg, perm, int64(len(f.Data)))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("ociimage %s: %s: %w", img.Ref, p, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// header returns a tar header owned by root with the fixed time. Mode
// carries the special bits the way tar expects (c_ISUID etc.).
func header(name string, typ byte, perm fs.FileMode, size int64) *tar.Header {
	mode := int64(perm.Perm())
	if perm&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if perm&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if perm&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return &tar.Header{
		Typeflag: typ, Name: name, Mode: mode, Size: size,
		Uid: 0, Gid: 0, Uname: "", Gname: "",
		ModTime: Epoch, Format: tar.FormatPAX,
	}
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func hexOf(d string) string { return strings.TrimPrefix(d, "sha256:") }

func blobPath(d string) string { return "blobs/sha256/" + hexOf(d) }
