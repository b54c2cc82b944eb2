//go:build !cgo

package discover

import (
	"path/filepath"

	"github.com/vgpu-dev/vgpu/internal/config"
)

// defaultLister of a binary built without cgo (vgpu-runtime, which starts for
// every container and must not pay a dynamic loader and go-nvml's package
// init) runs the vgpu-discover helper, only when a container asks for a GPU,
// and remembers its list in the state directory (cache.go): most containers
// that ask for one start without the helper.
func defaultLister(cfg *config.Config) Lister {
	helper, err := HelperPath()
	if err != nil || cfg.StateDir == "" {
		return HelperLister{Path: helper} // reports the error itself
	}
	return CachingLister{
		Lister:   HelperLister{Path: helper},
		Path:     filepath.Join(cfg.StateDir, config.StateGPUs),
		DevDir:   cfg.DevPath(""),
		Producer: helper,
	}
}
