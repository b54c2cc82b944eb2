//go:build !cgo

package driverlimit

// Set needs cgo: vgpu-runtime hands the call to vgpu-hook.
func Set(nvmlPath, cg string, ls []Limit) error { return ErrNoCgo }

// Clear needs cgo.
func Clear(nvmlPath, cg string, uuids []string) error { return ErrNoCgo }

// Got is what the driver holds for one GPU of a cgroup.
type Got struct {
	UUID                    string
	Soft, Hard, CurrentUsed uint64
	Set                     bool
	Err                     string
}

// Get needs cgo.
func Get(nvmlPath, cg string, uuids []string) ([]Got, error) { return nil, ErrNoCgo }
