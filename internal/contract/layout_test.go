package contract

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRegionLayout compiles the library's region.c with static assertions
// that its structs put every field the host reads where contract.go says:
// region.c defines the structs, contract.go the offsets, and this test keeps
// them equal (a wrong offset fails to compile, naming the field).
func TestRegionLayout(t *testing.T) {
	src, _ := filepath.Abs("../../lib/cudahook/src")
	inc, _ := filepath.Abs("../../lib/cudahook/include")
	var b strings.Builder
	b.WriteString("#include \"region.c\"\n")
	check := func(macro, st, field string) {
		fmt.Fprintf(&b, "_Static_assert(__builtin_offsetof(struct %s, %s) == VGPU_%s, \"struct %s field %s is not at VGPU_%s (internal/contract)\");\n", st, field, macro, st, field, macro)
	}
	check("REGION_HDR_VERSION", "region_header", "version")
	check("REGION_HDR_HEADER_SIZE", "region_header", "header_size")
	check("REGION_HDR_SLOT_COUNT", "region_header", "slot_count")
	check("REGION_HDR_SLOT_SIZE", "region_header", "slot_size")
	check("REGION_HDR_DEVICES", "region_header", "max_devices")
	check("REGION_HDR_SPANS_LOCK", "region_header", "spans_lock")
	check("REGION_COMPUTE_OFFSET", "region_header", "compute")
	check("REGION_GATE_OFFSET", "region_header", "compute_gate")
	check("REGION_SPANS_OFFSET", "region_header", "spans")
	check("REGION_QUEUE_OFFSET", "region_header", "queue_end")
	check("REGION_SLOT_STATE", "region_slot", "state")
	check("REGION_SLOT_PID", "region_slot", "pid")
	check("REGION_SLOT_CLAIMED", "region_slot", "claimed_ns")
	check("REGION_SLOT_PENDING", "region_slot", "pending")
	check("REGION_SLOT_USAGE", "region_slot", "usage")
	check("REGION_COMPUTE_BUSY", "vgpu_compute_shared", "busy_ns")
	check("REGION_COMPUTE_LAUNCHES", "vgpu_compute_shared", "launches")
	b.WriteString("_Static_assert(sizeof(struct vgpu_compute_shared) == VGPU_REGION_COMPUTE_SIZE, \"compute entry size is not VGPU_REGION_COMPUTE_SIZE\");\n")
	b.WriteString("_Static_assert(VGPU_REGION_DEVICES <= 1u << (64 - VGPU_REGION_PENDING_DEV_SHIFT), \"pending cannot hold every device index above VGPU_REGION_PENDING_DEV_SHIFT\");\n")
	b.WriteString("_Static_assert(sizeof(struct region_slot) == VGPU_REGION_SLOT_SIZE, \"slot size is not VGPU_REGION_SLOT_SIZE\");\n")
	f := filepath.Join(t.TempDir(), "layout.c")
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	out, err := exec.Command(cc, "-std=gnu11", "-D_GNU_SOURCE", "-include", filepath.Join(src, "compat.h"), "-I"+src, "-I"+inc, "-fsyntax-only", f).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, out)
	}
}
