//go:build !cgo

package discover

// nvmlLister of a binary built without cgo (vgpu-runtime, which starts for
// every container and must not pay a dynamic loader and go-nvml's package
// init) runs the vgpu-discover helper: only when a container asks for a GPU.
type nvmlLister struct{}

func (nvmlLister) ListGPUs(nvmlPath string) ([]GPU, error) {
	return HelperLister{}.ListGPUs(nvmlPath)
}
