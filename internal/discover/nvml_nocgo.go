//go:build !cgo

package discover

import "errors"

type nvmlLister struct{}

// ListGPUs needs go-nvml, which needs cgo.
func (nvmlLister) ListGPUs(string) ([]GPU, error) {
	return nil, errors.New("GPU discovery needs NVML, and this binary was built without cgo (build with CGO_ENABLED=1)")
}
