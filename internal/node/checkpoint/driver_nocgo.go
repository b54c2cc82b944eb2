//go:build !cgo

package checkpoint

import "fmt"

func openDriver(path string) (driver, error) {
	return nil, fmt.Errorf("%w: this vgpu-node was built without cgo", ErrNoAPI)
}
