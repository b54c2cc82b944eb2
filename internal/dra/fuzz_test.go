package dra

import "testing"

// Device names come from allocation results (the API server's objects):
// deviceIndex accepts exactly the names DeviceName makes.
func FuzzDeviceIndex(f *testing.F) {
	for _, s := range []string{"gpu-0", "gpu-17", "gpu-", "gpu--1", "gpu-01", "gpu-+1", "tpu-0", "gpu-99999999999999999999", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		i, err := deviceIndex(name)
		if err != nil {
			return
		}
		if i < 0 || DeviceName(i) != name {
			t.Fatalf("deviceIndex(%q) = %d, but DeviceName(%d) = %q", name, i, i, DeviceName(i))
		}
	})
}
