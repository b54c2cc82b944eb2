package state

import (
	"errors"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// Admission is a pure step over the view of the store: given the ledger
// and the others' admission words in memory, it refuses a mix of modes on
// a GPU, and admitting a request beside a request-0 tenant narrows that
// tenant's word (to be written by the transaction), with nothing on disk.
func TestAdmitIsAPureStep(t *testing.T) {
	lib := &tenant.Library{DriverCuda: "/a", DriverNvml: "/b", SharedDir: "/s"}
	g0 := tenant.GPU{UUID: "GPU-0", MemoryBytes: 16 << 30}
	zero, ph := 0, 0
	surplus := &tenant.Record{ID: "surplus", Library: lib, Devices: []tenant.Device{{GPU: g0, Compute: 100, ComputeRequest: &zero, Phase: &ph}}}
	view := View{
		Ledger: tenant.NewLedger([]*tenant.Record{surplus}, "/nonexistent"),
		Static: map[string][]uint64{"surplus": {arbiter.Word(10000, 0)}},
	}
	spatial := &tenant.Record{ID: "s", Library: lib, Devices: []tenant.Device{{GPU: g0, Compute: 50, Mode: tenant.Spatial, MPSPipe: "/p"}}}
	var ae *AdmissionError
	if _, err := Admit(view, spatial); !errors.As(err, &ae) || !strings.Contains(err.Error(), "container surplus runs on it time sliced") {
		t.Errorf("a spatial device beside a time-sliced tenant: %v", err)
	}
	r := 60
	asks := &tenant.Record{ID: "asks", Library: lib, Devices: []tenant.Device{{GPU: g0, Compute: 100, ComputeRequest: &r}}}
	adm, err := Admit(view, asks)
	if err != nil {
		t.Fatal(err)
	}
	share, _ := arbiter.Unword(adm.Static[0])
	if share != 6000 || asks.Devices[0].Phase == nil {
		t.Errorf("request 60 admitted with share %d bp, phase %v; want 6000 and a slot", share, asks.Devices[0].Phase)
	}
	if len(adm.Narrow) != 1 || adm.Narrow[0].ID != "surplus" {
		t.Fatalf("narrowed %+v, want the surplus tenant's word", adm.Narrow)
	}
	if s, _ := arbiter.Unword(adm.Narrow[0].Word); s != 4000 {
		t.Errorf("the surplus tenant narrowed to %d bp, want the 4000 the request leaves", s)
	}
}
