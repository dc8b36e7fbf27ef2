// Package corrupt damages a pgBackRest backup in a bucket's folder, as the
// drill tests (scripts and e2e) do to prove that a drill fails on it.
package corrupt

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// span is how many bytes Backup inverts. One changed byte can land where
// the compressed stream's decoder ignores it (seen in a bundle: the copy
// restored the file intact, its checksum matching); a run of them cannot.
const span = 4096

// Backup inverts span bytes in the middle of the largest file under dir (a
// backup's folder in the bucket) other than its manifest: a bundle of small
// files (repo1-bundle) or a file stored alone. It returns that file and its
// size.
func Backup(dir string) (string, int64, error) {
	var biggest string
	var size int64
	_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() || strings.HasPrefix(e.Name(), "backup.manifest") {
			return nil
		}
		if i, err := e.Info(); err == nil && i.Size() > size {
			biggest, size = p, i.Size()
		}
		return nil
	})
	if biggest == "" {
		return "", 0, errors.New("no file of the backup under " + dir)
	}
	b, err := os.ReadFile(biggest)
	if err != nil {
		return "", 0, err
	}
	for i := max(0, len(b)/2-span/2); i < min(len(b), len(b)/2+span/2); i++ {
		b[i] ^= 0xff
	}
	return biggest, size, os.WriteFile(biggest, b, 0o644) //nolint:gosec // the tests' own bucket folder, found by walking it
}
