package fsperm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Reachable reports whether uid/gid (with no supplementary groups) can
// traverse every directory from / down to dir. Directories that do not
// exist yet are skipped: whoever creates them chooses their mode. When it
// cannot, the error names the first directory in the way.
func Reachable(dir string, uid, gid uint32) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return err
		default:
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				return fmt.Errorf("%s: no Unix permissions to check", d)
			}
			mode := fi.Mode().Perm()
			var bit os.FileMode = 0o001
			switch {
			case st.Uid == uid:
				bit = 0o100
			case st.Gid == gid:
				bit = 0o010
			}
			if mode&bit == 0 {
				return fmt.Errorf("%s (mode %04o, owner %d:%d) is not searchable by uid %d", d, mode, st.Uid, st.Gid, uid)
			}
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}
