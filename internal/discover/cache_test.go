package discover

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// countingLister lists gpus (or fails with err) and counts its calls.
type countingLister struct {
	gpus  []GPU
	err   error
	calls int
}

func (l *countingLister) ListGPUs(string) ([]GPU, error) {
	l.calls++
	return l.gpus, l.err
}

// cacheHost is a host for CachingLister: boot id, kernel module directory,
// device nodes (plain files will do: the key reads their metadata), the
// NVML library and the listing program, all under one temporary directory.
type cacheHost struct {
	dir, nvml, producer, record string
}

func newCacheHost(t *testing.T) *cacheHost {
	t.Helper()
	dir := t.TempDir()
	h := &cacheHost{
		dir:      dir,
		nvml:     filepath.Join(dir, "lib", "libnvidia-ml.so.580.95.05"),
		producer: filepath.Join(dir, "bin", HelperName),
		record:   filepath.Join(dir, "state", ".gpus"),
	}
	for _, d := range []string{"lib", "bin", "dev"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h.write(t, h.nvml, "nvml 580")
	h.write(t, h.producer, "helper 1")
	h.write(t, filepath.Join(dir, "boot_id"), "3f1c0e9e-0000-4000-8000-000000000001\n")
	for _, n := range []string{"nvidiactl", "nvidia-uvm", "nvidia0", "null"} {
		h.write(t, filepath.Join(dir, "dev", n), "")
	}
	savedBoot, savedModule := bootIDPath, modulePath
	t.Cleanup(func() { bootIDPath, modulePath = savedBoot, savedModule })
	bootIDPath = filepath.Join(dir, "boot_id")
	modulePath = filepath.Join(dir, "module", "nvidia") // absent: no module loaded
	return h
}

func (h *cacheHost) write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replace puts a new file at p with the same content and times: made before
// the old one goes, so that it has another inode whatever the filesystem.
func (h *cacheHost) replace(t *testing.T, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	fi, serr := os.Stat(p)
	if err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	h.write(t, p+".new", string(b))
	if err := os.Chtimes(p+".new", fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".new", p); err != nil {
		t.Fatal(err)
	}
}

func (h *cacheHost) lister(l Lister) CachingLister {
	return CachingLister{Lister: l, Path: h.record, DevDir: filepath.Join(h.dir, "dev"), Producer: h.producer}
}

var twoGPUs = []GPU{
	{Index: 0, UUID: "GPU-5e3b6a2e-0000-4000-8000-000000000000", Name: "NVIDIA H100", Minor: 0, MemoryBytes: 80 << 30},
	{Index: 1, UUID: "GPU-5e3b6a2e-0000-4000-8000-000000000001", Name: "NVIDIA H100", Minor: 1, MemoryBytes: 80 << 30},
}

// list calls c.ListGPUs and checks that it returned twoGPUs and that the
// inner lister ran wantCalls times in all.
func list(t *testing.T, what string, c CachingLister, nvml string, inner *countingLister, wantCalls int) {
	t.Helper()
	got, err := c.ListGPUs(nvml)
	if err != nil || !reflect.DeepEqual(got, twoGPUs) {
		t.Fatalf("%s: ListGPUs = %+v, %v", what, got, err)
	}
	if inner.calls != wantCalls {
		t.Fatalf("%s: the lister ran %d times, want %d", what, inner.calls, wantCalls)
	}
}

func TestCachingListerHitAndInvalidation(t *testing.T) {
	h := newCacheHost(t)
	inner := &countingLister{gpus: twoGPUs}
	c := h.lister(inner)
	calls := 0
	miss := func(what string) { calls++; list(t, what, c, h.nvml, inner, calls) }
	hit := func(what string) { list(t, what, c, h.nvml, inner, calls) }

	miss("first listing")
	if fi, err := os.Stat(h.record); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("record: %v, %v; want a 0600 file", fi, err)
	}
	hit("second listing")
	hit("third listing")

	h.write(t, bootIDPath, "3f1c0e9e-0000-4000-8000-000000000002\n")
	miss("after a reboot")
	hit("again after the reboot")

	if err := os.MkdirAll(modulePath, 0o755); err != nil {
		t.Fatal(err)
	}
	miss("the kernel module loaded")
	hit("again")
	if err := os.Mkdir(modulePath+".new", 0o755); err != nil { // reloaded: another directory
		t.Fatal(err)
	}
	os.Remove(modulePath)
	if err := os.Rename(modulePath+".new", modulePath); err != nil {
		t.Fatal(err)
	}
	miss("the kernel module reloaded")

	h.replace(t, h.nvml)
	miss("NVML library replaced in place")
	newer := filepath.Join(h.dir, "lib", "libnvidia-ml.so.590.10.01")
	h.write(t, newer, "nvml 590")
	calls++
	list(t, "another driver version", c, newer, inner, calls)
	list(t, "again, the other driver version", c, newer, inner, calls)
	miss("back to the first driver (the record holds one key)")

	h.replace(t, h.producer)
	miss("vgpu-discover reinstalled")

	h.write(t, filepath.Join(h.dir, "dev", "nvidia1"), "")
	miss("a device node added")
	h.replace(t, filepath.Join(h.dir, "dev", "nvidia0"))
	miss("a device node made again")
	os.Remove(filepath.Join(h.dir, "dev", "nvidia1"))
	miss("a device node removed")
	h.write(t, filepath.Join(h.dir, "dev", "zero"), "")
	hit("another device's node added")
}

// A record that is not vgpu's own, or not well-formed, is ignored and
// replaced; never returned, even when its key matches.
func TestCachingListerIgnoresBadRecords(t *testing.T) {
	h := newCacheHost(t)
	inner := &countingLister{gpus: twoGPUs}
	c := h.lister(inner)
	key, err := c.key(h.nvml)
	if err != nil {
		t.Fatal(err)
	}
	poisoned, _ := json.Marshal(gpuRecord{Key: key, GPUs: []GPU{{Index: 0, UUID: "GPU-evil", Minor: 7, MemoryBytes: 1 << 50}}})
	if err := os.MkdirAll(filepath.Dir(h.record), 0o711); err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, bad := range []struct {
		what string
		make func() error
	}{
		{"readable by others", func() error { return os.WriteFile(h.record, poisoned, 0o644) }},
		{"a symlink to a record", func() error {
			p := filepath.Join(h.dir, "elsewhere")
			if err := os.WriteFile(p, poisoned, 0o600); err != nil {
				t.Fatal(err)
			}
			return os.Symlink(p, h.record)
		}},
		{"owned by another user", func() error {
			if os.Geteuid() != 0 {
				return errors.New("skip")
			}
			if err := os.WriteFile(h.record, poisoned, 0o600); err != nil {
				return err
			}
			return os.Chown(h.record, 65534, 65534)
		}},
		{"corrupt", func() error { return os.WriteFile(h.record, poisoned[:len(poisoned)/2], 0o600) }},
		{"empty", func() error { return os.WriteFile(h.record, nil, 0o600) }},
		{"no GPU", func() error {
			b, _ := json.Marshal(gpuRecord{Key: key})
			return os.WriteFile(h.record, b, 0o600)
		}},
		{"indexes out of order", func() error {
			b, _ := json.Marshal(gpuRecord{Key: key, GPUs: []GPU{twoGPUs[1], twoGPUs[0]}})
			return os.WriteFile(h.record, b, 0o600)
		}},
		{"another key", func() error {
			b, _ := json.Marshal(gpuRecord{Key: key + "x", GPUs: twoGPUs[:1]})
			return os.WriteFile(h.record, b, 0o600)
		}},
	} {
		os.Remove(h.record)
		if err := bad.make(); err != nil {
			if err.Error() == "skip" {
				continue
			}
			t.Fatalf("%s: %v", bad.what, err)
		}
		calls++
		list(t, bad.what, c, h.nvml, inner, calls)
		list(t, bad.what+", then the record written in its place", c, h.nvml, inner, calls)
	}
	// A well-formed record of vgpu's own with this key is what it says.
	if err := os.WriteFile(h.record, poisoned, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := c.ListGPUs(h.nvml); err != nil || len(got) != 1 || got[0].UUID != "GPU-evil" {
		t.Errorf("a trusted record: %+v, %v", got, err)
	}
}

// A failed listing is not remembered, and a host whose key cannot be taken
// lists every time and writes nothing.
func TestCachingListerFailures(t *testing.T) {
	h := newCacheHost(t)
	inner := &countingLister{err: errors.New("NVML init with x: Driver Not Loaded")}
	c := h.lister(inner)
	if _, err := c.ListGPUs(h.nvml); err == nil || err != inner.err {
		t.Fatalf("error: %v", err)
	}
	if _, err := os.Stat(h.record); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed listing left a record: %v", err)
	}
	inner.err, inner.gpus = nil, twoGPUs
	list(t, "the driver loaded", c, h.nvml, inner, 2)
	list(t, "again", c, h.nvml, inner, 2)

	// No boot id: no key, no record read or written.
	os.Remove(bootIDPath)
	os.Remove(h.record)
	list(t, "no boot id", c, h.nvml, inner, 3)
	list(t, "no boot id, again", c, h.nvml, inner, 4)
	if _, err := os.Stat(h.record); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a record without a key: %v", err)
	}
	// No record path: the lister every time.
	c.Path = ""
	list(t, "no record path", c, h.nvml, inner, 5)
}
