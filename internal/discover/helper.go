package discover

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// HelperName is the program that lists GPUs through the driver's NVML for
// binaries built without cgo (cmd/vgpu-discover): `vgpu-discover
// <libnvidia-ml path>` prints the list as a JSON array of GPU.
const HelperName = "vgpu-discover"

// HelperLister lists GPUs by running the helper. Path "" is HelperName in the
// directory of the running executable (make install puts them side by side);
// never a PATH search, since the runtime runs as root.
type HelperLister struct {
	Path string
}

// HelperPath is HelperName in the directory of the running executable.
func HelperPath() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding %s: %w", HelperName, err)
	}
	return filepath.Join(filepath.Dir(self), HelperName), nil
}

// ListGPUs runs `<helper> nvmlPath` and decodes its output.
func (l HelperLister) ListGPUs(nvmlPath string) ([]GPU, error) {
	helper := l.Path
	if helper == "" {
		var err error
		if helper, err = HelperPath(); err != nil {
			return nil, err
		}
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helper, nvmlPath)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("listing GPUs: %s is missing (it lists the GPUs for programs built without cgo; make install puts it beside them)", helper)
		}
		// The helper's message says what NVML refused; pass it on as is.
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return nil, errors.New(strings.TrimPrefix(msg, HelperName+": "))
		}
		return nil, fmt.Errorf("listing GPUs: %s: %w", helper, err)
	}
	var gpus []GPU
	if err := json.Unmarshal(stdout.Bytes(), &gpus); err != nil {
		return nil, fmt.Errorf("listing GPUs: %s printed no GPU list: %w", helper, err)
	}
	return gpus, nil
}
