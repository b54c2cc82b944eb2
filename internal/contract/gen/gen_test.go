package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The committed generated files are what the generator writes now: run
// `make generate` after a change of contract.go, vgpu_region.h or
// vgpu_share.h, and commit them all. The headers' halves run cgo -godefs,
// which needs the C compiler the library's build needs anyway.
func TestGenerated(t *testing.T) {
	h, err := ContractHeader("../contract.go")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{filepath.Join("..", ContractHeaderPath): h}
	for _, g := range Godefs {
		z, err := GodefsGo("..", g.Input)
		if err != nil {
			t.Fatal(err)
		}
		want[filepath.Join("..", g.Output)] = z
	}
	for path, want := range want {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what the generator writes now: run make generate and commit it", path)
		}
	}
}

func TestCName(t *testing.T) {
	for in, want := range map[string]string{
		"QuotaMaxBytes": "QUOTA_MAX_BYTES", "UUIDMax": "UUID_MAX", "PeriodMaxMS": "PERIOD_MAX_MS",
		"MaxPhase": "MAX_PHASE", "ShareMemMaxMS": "SHARE_MEM_MAX_MS", "PathMax": "PATH_MAX",
	} {
		if got := CName(in); got != want {
			t.Errorf("CName(%s) = %s, want %s", in, got, want)
		}
	}
}
