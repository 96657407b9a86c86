package modelserver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// HeaderWeights carries Config.WeightsDigest on every response, so that a
// test can tell which bytes the engine loaded (a registered model version
// fetched by the worker, say).
const HeaderWeights = "X-Model-Weights"

// WeightsDigest "loads" the weights at path as an engine would, reading
// every byte, and answers a digest of them: for a file, "sha256:<hex>" of
// its bytes (the digest Atelier's artifact store gives a file); for a
// directory, "sha256:<hex>" of its files' relative paths and digests in
// lexical order (the fake's own, not the store's manifest digest). A path
// that cannot be read is an error, as missing weights are for an engine.
func WeightsDigest(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("load weights: %w", err)
	}
	if !fi.IsDir() {
		return fileDigest(path)
	}
	h := sha256.New()
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(path, p)
		if err != nil {
			return err
		}
		dg, err := fileDigest(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%s\n", filepath.ToSlash(rel), dg)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("load weights: %w", err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("load weights: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("load weights %s: %w", path, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
