//go:build !cgo

package nvmlfeed

import "errors"

// NVML needs go-nvml, which needs cgo.
type NVML struct{}

// Open fails without cgo.
func Open(string) (*NVML, error) {
	return nil, errors.New("vgpu node reads NVML through go-nvml, and this binary was built without cgo (build with CGO_ENABLED=1)")
}

func (*NVML) Read() ([]Sample, error) { return nil, errors.New("no NVML") }
func (*NVML) Close() error            { return nil }
func (*NVML) GPUs() ([]GPU, error)    { return nil, errors.New("no NVML") }
