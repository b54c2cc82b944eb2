// Package statetest holds test helpers for state directories.
package statetest

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// PreviousRelease copies the state directory that release 0.1.0 wrote
// (internal/state/testdata/release-0.1.0, see its README), given as
// fixture, into a temp dir and returns it.
// Files ending in .gz are stored gunzipped.
func PreviousRelease(t testing.TB, fixture string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.Walk(fixture, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(fixture, p)
		out := filepath.Join(dst, rel)
		switch {
		case fi.IsDir():
			return os.MkdirAll(out, 0o777)
		case filepath.Ext(p) == ".gz":
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			defer in.Close()
			z, err := gzip.NewReader(in)
			if err != nil {
				return err
			}
			b, err := io.ReadAll(z)
			if err != nil {
				return err
			}
			return os.WriteFile(out[:len(out)-3], b, 0o666)
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(out, b, 0o644)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}
