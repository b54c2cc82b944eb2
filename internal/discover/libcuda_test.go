package discover

import (
	"regexp"
	"testing"
)

// libcudaVersion accepts exactly the names the former pattern
// ^libcuda\.so\.([0-9]+(\.[0-9]+)+)$ did, with the same version.
func TestLibcudaVersion(t *testing.T) {
	re := regexp.MustCompile(`^libcuda\.so\.([0-9]+(\.[0-9]+)+)$`)
	for _, name := range []string{
		"libcuda.so.580.95.05", "libcuda.so.590.1.2", "libcuda.so.1.2", "libcuda.so.1", "libcuda.so.",
		"libcuda.so", "libcuda.so.580..05", "libcuda.so.580.95.", "libcuda.so..580", "libcuda.so.580.9x",
		"libcuda.so.580.95.05.bak", "xlibcuda.so.580.95", "libcuda.so.580.95 ", "libcuda.so.+1.2", "libcuda.so.٣.4",
	} {
		want, wok := "", false
		if m := re.FindStringSubmatch(name); m != nil {
			want, wok = m[1], true
		}
		if got, ok := libcudaVersion(name); got != want || ok != wok {
			t.Errorf("libcudaVersion(%q) = %q, %v; the pattern says %q, %v", name, got, ok, want, wok)
		}
	}
}

func FuzzLibcudaVersion(f *testing.F) {
	re := regexp.MustCompile(`^libcuda\.so\.([0-9]+(\.[0-9]+)+)$`)
	f.Add("libcuda.so.580.95.05")
	f.Add("libcuda.so.1")
	f.Fuzz(func(t *testing.T, name string) {
		want, wok := "", false
		if m := re.FindStringSubmatch(name); m != nil {
			want, wok = m[1], true
		}
		if got, ok := libcudaVersion(name); got != want || ok != wok {
			t.Errorf("libcudaVersion(%q) = %q, %v; the pattern says %q, %v", name, got, ok, want, wok)
		}
	})
}
