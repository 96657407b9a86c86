package ociimage

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path"
	"strings"
)

// Busybox returns a small step image: a static busybox at /bin/busybox with
// a link for each of its applets (sh, echo, cat, env, sleep, ...), as
// `busybox --list-full` names them, and /etc/passwd, /etc/group, /tmp and
// /root, with Cmd /bin/sh. binary must be statically linked (Debian's
// busybox-static): the image has no C library. The applets are symbolic
// links to /bin/busybox.
//
// Known limit of Debian's static busybox: applets that resolve names (wget,
// nslookup) crash without glibc's NSS modules, even for numeric addresses;
// nc works.
func Busybox(ref, binary string) (Image, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return Image{}, err
	}
	if err := checkStatic(binary); err != nil {
		return Image{}, err
	}
	var out, stderr bytes.Buffer
	cmd := exec.Command(binary, "--list-full")
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return Image{}, fmt.Errorf("%s --list-full: %w: %s", binary, err, stderr.Bytes())
	}
	files := []File{
		{Path: "/bin/busybox", Mode: 0o755, Data: data},
		{Path: "/etc/passwd", Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		{Path: "/etc/group", Data: []byte("root:x:0:\nnogroup:x:65534:\n")},
		Dir("/tmp", 0o1777),
		Dir("/root", 0o700),
	}
	seen := map[string]bool{"/bin/busybox": true}
	for _, l := range strings.Fields(out.String()) {
		p := path.Clean("/" + l)
		if seen[p] {
			continue
		}
		seen[p] = true
		files = append(files, Symlink(p, "/bin/busybox"))
	}
	return Image{
		Ref: ref, Files: files, Cmd: []string{"/bin/sh"},
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"},
	}, nil
}

// Static returns an image holding one static executable at p, run as the
// entrypoint: e.g. the pause program of pod sandboxes.
func Static(ref, binary, p string) (Image, error) {
	if err := checkStatic(binary); err != nil {
		return Image{}, err
	}
	data, err := os.ReadFile(binary)
	if err != nil {
		return Image{}, err
	}
	return Image{Ref: ref, Files: []File{{Path: p, Mode: 0o755, Data: data}}, Entrypoint: []string{p}, Env: []string{}}, nil
}

// checkStatic fails for an executable that needs a dynamic loader, which
// an image without a C library does not have.
func checkStatic(binary string) error {
	f, err := elf.Open(binary)
	if err != nil {
		return fmt.Errorf("%s: %w", binary, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; the image has no C library (Debian: install busybox-static)", binary)
		}
	}
	return nil
}
