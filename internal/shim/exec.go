package shim

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DefaultRuntimes are tried in order when the configuration names none.
var DefaultRuntimes = []string{"runc", "crun"}

// FindRuntime returns the first candidate that is an executable file: absolute
// paths as they are, bare names through PATH. It never returns this program
// itself (vgpu-runtime installed under the name runc would exec itself forever).
func FindRuntime(candidates []string) (string, error) {
	self, _ := os.Executable()
	var tried []string
	for _, c := range candidates {
		if c == "" {
			continue
		}
		tried = append(tried, c)
		p := c
		if !filepath.IsAbs(c) {
			var err error
			if p, err = exec.LookPath(c); err != nil {
				continue
			}
			if !filepath.IsAbs(p) {
				if p, err = filepath.Abs(p); err != nil {
					continue
				}
			}
		}
		st, err := os.Stat(p)
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			continue
		}
		if self != "" {
			if me, err := os.Stat(self); err == nil && os.SameFile(me, st) {
				continue
			}
		}
		return p, nil
	}
	if len(tried) == 0 {
		return "", errors.New("no low-level runtime configured")
	}
	return "", fmt.Errorf("no low-level runtime found (tried %s)", strings.Join(tried, ", "))
}
