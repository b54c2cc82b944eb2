package docscheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// deviceRun is a run of --device /dev/nvidia… flags, across shell line
// continuations and Markdown line breaks.
var deviceRun = regexp.MustCompile(`--device\s+/dev/nvidia[A-Za-z0-9-]*(?:\s*\\?\s+--device\s+/dev/nvidia[A-Za-z0-9-]*)*`)

var gpuNode = regexp.MustCompile(`/dev/nvidia[0-9]+$`)

// DeviceProblem is a page's list of device nodes that is not the one the
// hook needs.
type DeviceProblem struct {
	File string
	Line int
	Got  string
	Want string
}

func (p DeviceProblem) Error() string {
	return fmt.Sprintf("%s:%d: the device nodes %q are not the ones vgpu-hook needs; write %q (internal/discover DeviceFlags, with any GPU number)", p.File, p.Line, p.Got, p.Want)
}

// DeviceLists checks every list of --device /dev/nvidia… flags in README.md
// and docs/*.md against want (discover.DeviceFlags(0)): the same nodes in the
// same order, the last (the GPU's) with any number.
func DeviceLists(root, want string) ([]DeviceProblem, error) {
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	sort.Strings(pages)
	pages = append([]string{filepath.Join(root, "README.md")}, pages...)
	var probs []DeviceProblem
	for _, p := range pages {
		rel, _ := filepath.Rel(root, p)
		text, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("docs-check: %w", err)
		}
		for _, m := range deviceRun.FindAllIndex(text, -1) {
			got := strings.Join(strings.Fields(strings.ReplaceAll(string(text[m[0]:m[1]]), "\\", " ")), " ")
			if gpuNode.ReplaceAllString(got, "/dev/nvidia0") != want {
				probs = append(probs, DeviceProblem{filepath.ToSlash(rel), 1 + strings.Count(string(text[:m[0]]), "\n"), got, want})
			}
		}
	}
	return probs, nil
}
