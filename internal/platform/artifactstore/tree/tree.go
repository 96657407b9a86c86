package tree

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"
)

// Objects is where a transfer's bytes are kept, by digest: a project's part
// of the artifact store (artifactstore.Store), or, inside a step's pod, the
// objects an attempt's grant reaches through signed URLs (the launcher).
type Objects interface {
	// Put stores size bytes read from r under digest, unless they are
	// stored already. The bytes must hash to digest: an upload whose bytes
	// do not is aborted and nothing appears under digest. r is an
	// io.Seeker when the bytes can be read again.
	Put(ctx context.Context, digest string, size int64, r io.Reader, contentType string) error
	// Open reads digest's bytes; an error wrapping ErrNotFound when they
	// are not stored.
	Open(ctx context.Context, digest string) (io.ReadCloser, error)
}

// PartsPutter is Objects that store a large file in parts whose sha256
// each the store checks as the part arrives (S3: x-amz-checksum-sha256 on
// each part of a multipart upload). putFile hashes the parts in the same
// read of the file that hashes the whole (HashFileParts), so the bytes
// sent need no second hash to be known to be the digest's: a part that
// changed since is refused by the store, and the upload with it.
type PartsPutter interface {
	Objects
	// PartSize is the size of the parts of an object of size bytes; 0 or
	// less, or size or more: the object goes through Put.
	PartSize(size int64) int64
	// PutParts stores the size bytes of r under digest, unless they are
	// stored already: part i is the partSize bytes at i×partSize (the last
	// may be shorter) and must hash to parts[i], else the upload is aborted
	// and nothing appears under digest.
	PutParts(ctx context.Context, digest string, size int64, r io.ReaderAt, partSize int64, parts [][]byte, contentType string) error
}

// Presigner is Objects that prepare many transfers in one step (the
// launcher's Client: one signing request to the gateway for a window of
// objects rather than one per object). Put and Open work without it; a
// transfer of a directory tells it, before each window of files, which
// objects come next.
type Presigner interface {
	// PresignWindow is how many objects to announce at a time; 0 or less:
	// none (every Put and Open prepares its own object).
	PresignWindow() int
	// Presign prepares the Opens of gets and the Puts of puts about to
	// run. An error stops the transfer: one that no object-by-object
	// attempt could get past (a refusal of the whole request, such as the
	// project's artifact cap).
	Presign(ctx context.Context, gets []string, puts []Upload) error
}

// Upload is an object a Put is about to store.
type Upload struct {
	Digest      string
	Size        int64
	ContentType string
}

// presignWindow is objs' window, 0 when it presigns nothing.
func presignWindow(objs Objects) (Presigner, int) {
	if p, ok := objs.(Presigner); ok {
		if n := p.PresignWindow(); n > 0 {
			return p, n
		}
	}
	return nil, 0
}

// ErrNotFound is returned for a digest the objects do not hold.
var ErrNotFound = errors.New("artifact not found in the store")

// ErrEscapes is returned for an output that is, or holds, a symbolic
// link or anything but regular files and directories.
var ErrEscapes = errors.New("artifacts hold regular files and directories only")

// Object is what was stored: a file, or a directory of Files files.
type Object struct {
	Digest string // "sha256:<hex>": of the bytes, or of a directory's manifest
	Size   int64  // bytes; the sum of the files' for a directory
	Files  int    // 0 for a file
}

// Manifest lists a stored directory's files in the order a walk of it
// visits them (lexical per directory). Its sha256
// (of the JSON Marshal writes) is the directory's digest, so two
// directories with the same files and modes have the same digest.
type Manifest struct {
	Files []ManifestFile `json:"files"`
}

// ManifestFile is one file of a stored directory.
type ManifestFile struct {
	Path       string `json:"path"` // slash-separated, relative to the directory
	Digest     string `json:"digest"`
	Size       int64  `json:"size"`
	Executable bool   `json:"executable,omitempty"`
}

// ManifestContentType marks a stored manifest.
const ManifestContentType = "application/vnd.atelier.manifest+json"

// FileContentType marks a stored file.
const FileContentType = "application/octet-stream"

// DigestOf is the digest ("sha256:<hex>") of a sha256 sum.
func DigestOf(sum []byte) string { return "sha256:" + hex.EncodeToString(sum) }

// Hex is a digest's hexadecimal part, or an error when it is not a sha256
// digest.
func Hex(digest string) (string, error) {
	hexd, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hexd) != 64 {
		return "", fmt.Errorf("%q is not a sha256 digest", digest)
	}
	if _, err := hex.DecodeString(hexd); err != nil || strings.ToLower(hexd) != hexd {
		return "", fmt.Errorf("%q is not a sha256 digest", digest)
	}
	return hexd, nil
}

// Put stores the file or directory at name inside root (which it
// cannot leave: os.Root refuses paths and links that escape), the files of
// a directory parallel at a time. Symbolic links, devices and sockets are
// refused (ErrEscapes); an empty directory is stored as an empty manifest.
func Put(ctx context.Context, objs Objects, root *os.Root, name string, parallel int) (Object, error) {
	fi, err := root.Lstat(name)
	if err != nil {
		return Object{}, err
	}
	switch {
	case fi.Mode().IsRegular():
		return putFile(ctx, objs, root, name)
	case fi.IsDir():
		return putDir(ctx, objs, root, name, parallel)
	}
	return Object{}, fmt.Errorf("%s is a %s: %w", name, kindOf(fi.Mode()), ErrEscapes)
}

// Size is the bytes of the regular files at name under root (a file, or
// every file of a directory); what cannot be read counts nothing. A
// project's artifact cap is held against it before anything is stored.
func Size(root *os.Root, name string) int64 {
	var n int64
	_ = fs.WalkDir(root.FS(), name, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// Escapes reports whether err refuses an output that leaves its root or
// is not regular files and directories: ErrEscapes, or os.Root's refusal
// of a path or link that escapes.
func Escapes(err error) bool {
	var pe *fs.PathError
	return errors.Is(err, ErrEscapes) || errors.As(err, &pe) && pe.Err != nil && pe.Err.Error() == "path escapes from parent"
}

func kindOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// putFile hashes the file, then uploads it (unless the store holds those
// bytes already) checking they still hash the same: the store checks each
// part against its sum from the first read (PartsPutter), or Put hashes
// the bytes again as they go.
func putFile(ctx context.Context, objs Objects, root *os.Root, name string) (Object, error) {
	return putOpened(ctx, objs, rootOpener(root), name)
}

// Opener reads a file of an output that is not under a directory the
// worker holds (a Ray job's outputs under a prefix of a bucket): name is
// slash-separated, relative to the output's source. Each call reads the
// file from its start.
type Opener func(ctx context.Context, name string) (io.ReadCloser, error)

func rootOpener(root *os.Root) Opener {
	return func(_ context.Context, name string) (io.ReadCloser, error) {
		f, err := root.Open(name)
		if err != nil {
			return nil, err
		}
		return f, nil
	}
}

// putOpened hashes the file open reads, then stores its bytes under that
// digest, reading them again: a seek back on the same reader (a file on
// disk, a blob.Reader) or a second open.
func putOpened(ctx context.Context, objs Objects, open Opener, name string) (Object, error) {
	f, err := open(ctx, name)
	if err != nil {
		return Object{}, err
	}
	defer func() {
		if f != nil { // a failed second open leaves none
			f.Close()
		}
	}()
	if file, ok := f.(*os.File); ok {
		if pp, ok := objs.(PartsPutter); ok {
			fi, err := file.Stat()
			if err != nil {
				return Object{}, err
			}
			if part := pp.PartSize(fi.Size()); part > 0 && fi.Size() > part {
				return putFileParts(ctx, pp, file, name, part)
			}
		}
	}
	n, sum, err := HashFile(f)
	if err != nil {
		return Object{}, fmt.Errorf("read %s: %w", name, err)
	}
	digest := DigestOf(sum)
	if sk, ok := f.(io.Seeker); ok {
		if _, err := sk.Seek(0, io.SeekStart); err != nil {
			return Object{}, err
		}
	} else {
		f.Close()
		if f, err = open(ctx, name); err != nil {
			return Object{}, err
		}
	}
	if err := objs.Put(ctx, digest, n, f, FileContentType); err != nil {
		return Object{}, fmt.Errorf("store %s: %w", name, err)
	}
	return Object{Digest: digest, Size: n}, nil
}

// putFileParts is putFile through a PartsPutter, in parts of part bytes.
func putFileParts(ctx context.Context, pp PartsPutter, f *os.File, name string, part int64) (Object, error) {
	n, sum, parts, err := HashFileParts(f, part)
	if err != nil {
		return Object{}, fmt.Errorf("read %s: %w", name, err)
	}
	digest := DigestOf(sum)
	if pp.PartSize(n) != part || n <= part { // the file changed size a lot since its stat
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return Object{}, err
		}
		err = pp.Put(ctx, digest, n, f, FileContentType)
	} else {
		err = pp.PutParts(ctx, digest, n, f, part, parts, FileContentType)
	}
	if err != nil {
		return Object{}, fmt.Errorf("store %s: %w", name, err)
	}
	return Object{Digest: digest, Size: n}, nil
}

// PutFileFrom stores the file name of src (tree.Put for a file that is
// not on a disk the worker holds).
func PutFileFrom(ctx context.Context, objs Objects, src Opener, name string) (Object, error) {
	return putOpened(ctx, objs, src, name)
}

// PutDirFrom stores the directory dir of src whose files are files (paths
// relative to dir, in any order), parallel at a time: the same manifest,
// so the same digest, as Put gives the same files on a disk, but for the
// executable bits src cannot have. No files: an empty directory.
func PutDirFrom(ctx context.Context, objs Objects, src Opener, dir string, files []string, parallel int) (Object, error) {
	mf := make([]ManifestFile, 0, len(files))
	for _, f := range files {
		if !fs.ValidPath(f) || f == "." {
			return Object{}, fmt.Errorf("%q is not a file of a directory", f)
		}
		mf = append(mf, ManifestFile{Path: f})
	}
	slices.SortFunc(mf, func(a, b ManifestFile) int { return walkOrder(a.Path, b.Path) })
	return storeDir(ctx, objs, src, dir, mf, parallel)
}

// walkOrder orders slash paths as fs.WalkDir visits them (lexically per
// directory: "a/b" before "a.txt", though '.' sorts before '/'), which is
// the order of a manifest's files.
func walkOrder(a, b string) int {
	return slices.Compare(strings.Split(a, "/"), strings.Split(b, "/"))
}

func putDir(ctx context.Context, objs Objects, root *os.Root, dir string, parallel int) (Object, error) {
	var files []ManifestFile
	err := fs.WalkDir(root.FS(), dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			return fmt.Errorf("%s is a %s: %w", p, kindOf(d.Type()), ErrEscapes)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel := p
		if dir != "." {
			rel = p[len(dir)+1:]
		}
		files = append(files, ManifestFile{Path: rel, Executable: fi.Mode()&0o111 != 0})
		return nil
	})
	if err != nil {
		return Object{}, err
	}
	if p, window := presignWindow(objs); p != nil {
		if err := putFilesPresigned(ctx, p, objs, root, dir, files, parallel, window); err != nil {
			return Object{}, err
		}
		return putManifest(ctx, objs, dir, files)
	}
	return storeDir(ctx, objs, rootOpener(root), dir, files, parallel)
}

// storeDir stores files (of dir, in a manifest's order) parallel at a
// time, then their manifest.
func storeDir(ctx context.Context, objs Objects, open Opener, dir string, files []ManifestFile, parallel int) (Object, error) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(parallel, 1))
	for i := range files {
		g.Go(func() error {
			o, err := putOpened(gctx, objs, open, path.Join(dir, files[i].Path))
			files[i].Digest, files[i].Size = o.Digest, o.Size
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return Object{}, err
	}
	return putManifest(ctx, objs, dir, files)
}

// putManifest stores the manifest of dir's stored files: the directory.
func putManifest(ctx context.Context, objs Objects, dir string, files []ManifestFile) (Object, error) {
	m := Manifest{Files: files}
	if m.Files == nil {
		m.Files = []ManifestFile{}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return Object{}, err
	}
	sum := sha256.Sum256(b)
	digest := DigestOf(sum[:])
	if err := objs.Put(ctx, digest, int64(len(b)), bytes.NewReader(b), ManifestContentType); err != nil {
		return Object{}, fmt.Errorf("store the manifest of %s: %w", dir, err)
	}
	var size int64
	for _, f := range files {
		size += f.Size
	}
	// Files is at least 1 for a directory so that 0 keeps meaning "a file".
	return Object{Digest: digest, Size: size, Files: max(len(files), 1)}, nil
}

// putFilesPresigned stores a directory's files window by window: one
// goroutine hashes a window's files (parallel at a time) and announces
// them to p, while the previous window's files upload (parallel at a
// time), so hashing and signing overlap the transfers and run at most a
// window or two ahead of them. A file's bytes are read twice, as putFile
// reads them: to hash, then to send.
func putFilesPresigned(parent context.Context, p Presigner, objs Objects, root *os.Root, dir string, files []ManifestFile, parallel, window int) error {
	// The first failure cancels the rest and is the one reported.
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	windows := make(chan []ManifestFile, 1)
	announced := make(chan error, 1)
	go func() {
		err := hashAndAnnounce(ctx, p, root, dir, files, parallel, window, windows)
		if err != nil {
			cancel(err) // the uploads stop
		}
		announced <- err
		close(windows)
	}()
	up := new(errgroup.Group)
	up.SetLimit(max(parallel, 1))
	// Bytes a directory holds twice go up once: the directory fails if
	// that upload does.
	sent := map[string]bool{}
	for win := range windows {
		for i := range win {
			if ctx.Err() != nil {
				break // an upload failed; drain what the hasher sent
			}
			if sent[win[i].Digest] {
				continue
			}
			sent[win[i].Digest] = true
			up.Go(func() error {
				name := path.Join(dir, win[i].Path)
				f, err := root.Open(name)
				if err == nil {
					defer f.Close()
					err = objs.Put(ctx, win[i].Digest, win[i].Size, f, FileContentType)
					if err != nil {
						err = fmt.Errorf("store %s: %w", name, err)
					}
				}
				if err != nil {
					cancel(err) // the hasher and the other uploads stop
				}
				return err
			})
		}
	}
	uerr, herr := up.Wait(), <-announced
	switch {
	case uerr == nil && herr == nil:
		return nil
	case ctx.Err() != nil && parent.Err() == nil:
		return context.Cause(ctx) // not the cancellation it caused
	case herr != nil:
		return herr
	}
	return uerr
}

// hashAndAnnounce hashes files window by window, announces each window's
// objects to p and hands the window to the uploads.
func hashAndAnnounce(ctx context.Context, p Presigner, root *os.Root, dir string, files []ManifestFile, parallel, window int, windows chan<- []ManifestFile) error {
	announced := map[string]bool{}
	for start := 0; start < len(files); start += window {
		win := files[start:min(start+window, len(files))]
		hg, hctx := errgroup.WithContext(ctx)
		hg.SetLimit(max(parallel, 1))
		for i := range win {
			hg.Go(func() error {
				if err := hctx.Err(); err != nil {
					return err
				}
				name := path.Join(dir, win[i].Path)
				f, err := root.Open(name)
				if err != nil {
					return err
				}
				defer f.Close()
				n, sum, err := HashFile(f)
				if err != nil {
					return fmt.Errorf("read %s: %w", name, err)
				}
				win[i].Digest, win[i].Size = DigestOf(sum), n
				return nil
			})
		}
		if err := hg.Wait(); err != nil {
			return err
		}
		puts := make([]Upload, 0, len(win))
		for _, f := range win {
			if !announced[f.Digest] { // each digest goes up once (putFilesPresigned)
				announced[f.Digest] = true
				puts = append(puts, Upload{Digest: f.Digest, Size: f.Size, ContentType: FileContentType})
			}
		}
		if err := p.Presign(ctx, nil, puts); err != nil {
			return err
		}
		select {
		case windows <- win:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// maxManifest bounds a manifest read (about 2 million files).
const maxManifest = 512 << 20

// ReadManifest reads and checks a stored directory's manifest.
func ReadManifest(ctx context.Context, objs Objects, digest string) (Manifest, error) {
	r, err := objs.Open(ctx, digest)
	if err != nil {
		return Manifest{}, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, maxManifest))
	if err != nil {
		return Manifest{}, err
	}
	return ParseManifest(digest, b)
}

// ParseManifest decodes a manifest's bytes, checking they hash to digest
// and name only valid, relative paths.
func ParseManifest(digest string, b []byte) (Manifest, error) {
	if sum := sha256.Sum256(b); DigestOf(sum[:]) != digest {
		return Manifest{}, fmt.Errorf("the stored manifest of %s does not match its digest", digest)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("manifest %s: %w", digest, err)
	}
	for _, f := range m.Files {
		if !fs.ValidPath(f.Path) || f.Path == "." {
			return Manifest{}, fmt.Errorf("manifest %s names an invalid path %q", digest, f.Path)
		}
	}
	return m, nil
}

// Get materializes o at dest, which must not exist: a file, or a
// directory when o.Files > 0, its files parallel at a time. It lands
// beside dest first and is renamed into place once every byte matched its
// digest, so dest is complete or absent.
func Get(ctx context.Context, objs Objects, o Object, dest string, parallel int) error {
	if o.Files == 0 {
		return getFile(ctx, objs, o.Digest, dest, false)
	}
	m, err := ReadManifest(ctx, objs, o.Digest)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".partial-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // after a successful rename, there is nothing left
	dirs := map[string]bool{}
	// Cancelled on an early return, which waits for the downloads under
	// way before tmp is removed.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(parallel, 1))
	p, window := presignWindow(objs)
	// presign announces the window of files from i, in the background:
	// the next window's while this one's files move (never further ahead,
	// so that targets are used soon after they are signed).
	presign := func(i int) chan error {
		win := m.Files[i:min(i+window, len(m.Files))]
		gets := make([]string, len(win))
		for j, f := range win {
			gets[j] = f.Digest
		}
		done := make(chan error, 1)
		go func() { done <- p.Presign(gctx, gets, nil) }()
		return done
	}
	var next chan error
	if p != nil && len(m.Files) > 0 {
		next = presign(0)
	}
	for i, f := range m.Files {
		if p != nil && i%window == 0 {
			if err := <-next; err != nil {
				if werr := g.Wait(); werr != nil {
					return werr // what cancelled the rest
				}
				return err
			}
			if i+window < len(m.Files) {
				next = presign(i + window)
			}
		}
		target := filepath.Join(tmp, filepath.FromSlash(f.Path))
		parent := filepath.Dir(target)
		if !dirs[parent] {
			if err := os.MkdirAll(parent, 0o755); err != nil {
				cancel()
				_ = g.Wait()
				return err
			}
			dirs[parent] = true
		}
		g.Go(func() error { return getFile(gctx, objs, f.Digest, target, f.Executable) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, dest)
}

// getFile downloads digest to dest through a temporary file beside it.
func getFile(ctx context.Context, objs Objects, digest, dest string, executable bool) error {
	r, err := objs.Open(ctx, digest)
	if err != nil {
		return err
	}
	defer r.Close()
	f, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".partial-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	_, sum, err := CopyHashing(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("download %s: %w", digest, err)
	}
	if got := DigestOf(sum); got != digest {
		return fmt.Errorf("downloaded bytes hash to %s, not %s", got, digest)
	}
	mode := os.FileMode(0o644)
	if executable {
		mode = 0o755
	}
	if err := os.Chmod(f.Name(), mode); err != nil {
		return err
	}
	return os.Rename(f.Name(), dest)
}
