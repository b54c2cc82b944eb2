package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The committed generated files are what the generator writes now: run
// `make generate` after a change of contract.go or vgpu_region.h, and commit
// both. The region's half runs cgo -godefs, which needs the C compiler the
// library's build needs anyway.
func TestGenerated(t *testing.T) {
	h, err := ContractHeader("../contract.go")
	if err != nil {
		t.Fatal(err)
	}
	z, err := RegionGo("..")
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]byte{filepath.Join("..", ContractHeaderPath): h, "../zregion.go": z} {
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
		"MaxPhase": "MAX_PHASE", "GrantHdrStamp": "GRANT_HDR_STAMP", "PathMax": "PATH_MAX",
	} {
		if got := CName(in); got != want {
			t.Errorf("CName(%s) = %s, want %s", in, got, want)
		}
	}
}
