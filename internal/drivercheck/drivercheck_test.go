package drivercheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// lib builds a shared object exporting the functions named.
func lib(t *testing.T, dir, name string, funcs ...string) string {
	t.Helper()
	var src strings.Builder
	for _, f := range funcs {
		src.WriteString("int " + f + "(void) { return 0; }\n")
	}
	src.WriteString("static int hidden(void) { return 1; }\nint data_symbol = 1;\n")
	c := filepath.Join(dir, name+".c")
	if err := os.WriteFile(c, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(dir, name)
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", so, c).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return so
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	standIn := lib(t, dir, "libvgpu-cuda.so", "cuInit", "cuMemAlloc_v2", "cuOnlyInStandIn")
	same := lib(t, dir, "libcuda.so.590.1.2", "cuInit", "cuMemAlloc_v2")
	newer := lib(t, dir, "libcuda.so.600.1.2", "cuInit", "cuMemAlloc_v2", "cuNewA", "cuNewB")

	if miss, err := Missing(Pair{newer, standIn}); err != nil || !reflect.DeepEqual(miss, []string{"cuNewA", "cuNewB"}) {
		t.Errorf("Missing = %v, %v; want the two new functions (not data, not static)", miss, err)
	}
	cache := filepath.Join(dir, "state", ".driver-checked")
	if err := Check([]Pair{{same, standIn}}, "590.1.2", cache); err != nil {
		t.Errorf("covered driver refused: %v", err)
	}
	if _, err := os.Stat(cache); err != nil {
		t.Errorf("success not remembered: %v", err)
	}
	err := Check([]Pair{{newer, standIn}}, "600.1.2", cache)
	if err == nil || !strings.Contains(err.Error(), "driver 600.1.2: libcuda.so.600.1.2 exports 2 function(s) that the vgpu stand-in "+standIn+" lacks (cuNewA, cuNewB)") ||
		!strings.Contains(err.Error(), "lib/cudahook/update-syms.sh "+dir+" && make build && make install") {
		t.Errorf("newer driver: %v", err)
	}
	// The record is of the files as they were: a driver replaced in place
	// (same name, new content) is checked again.
	if err := Check([]Pair{{same, standIn}}, "590.1.2", cache); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(cache)
	if err := os.Rename(newer, same); err != nil {
		t.Fatal(err)
	}
	if err := Check([]Pair{{same, standIn}}, "590.1.2", cache); err == nil {
		t.Error("a driver replaced in place passed on the record of the old one")
	}
	if after, _ := os.ReadFile(cache); string(after) != string(before) {
		t.Error("a failed check changed the record")
	}
	if _, err := Missing(Pair{filepath.Join(dir, "nonexistent"), standIn}); err == nil {
		t.Error("no error for a missing library")
	}
}
