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

// A device with no compute setting is paced at request 0 where a priority
// is in play on its GPU (its own, or a live tenant's), so that the order
// holds it and a high one's work is seen; on a GPU with no priority and no
// request it stays as it was, unpaced (the whole GPU, as natively).
func TestAdmitPacesBesidePriorities(t *testing.T) {
	lib := &tenant.Library{DriverCuda: "/a", DriverNvml: "/b", SharedDir: "/s"}
	g0 := tenant.GPU{UUID: "GPU-0", MemoryBytes: 16 << 30}
	unset := func(id string, p tenant.Priority) *tenant.Record {
		return &tenant.Record{ID: id, Library: lib, Devices: []tenant.Device{{GPU: g0, Compute: 100, Priority: p}}}
	}
	empty := View{Ledger: tenant.NewLedger(nil, "/nonexistent"), Static: map[string][]uint64{}}
	high := unset("high", tenant.High)
	for _, tc := range []struct {
		name  string
		view  View
		rec   *tenant.Record
		paced bool
	}{
		{"normal, alone", empty, unset("n", tenant.Normal), false},
		{"high, alone", empty, unset("h", tenant.High), true},
		{"low, alone", empty, unset("l", tenant.Low), true},
		{"normal beside a high", View{Ledger: tenant.NewLedger([]*tenant.Record{high}, "/nonexistent"), Static: map[string][]uint64{}}, unset("n2", tenant.Normal), true},
		{"normal beside a normal", View{Ledger: tenant.NewLedger([]*tenant.Record{unset("n3", tenant.Normal)}, "/nonexistent"), Static: map[string][]uint64{}}, unset("n4", tenant.Normal), false},
	} {
		adm, err := Admit(tc.view, tc.rec)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		d := tc.rec.Devices[0]
		if d.Paced() != tc.paced {
			t.Errorf("%s: paced %v (request %v), want %v", tc.name, d.Paced(), d.ComputeRequest, tc.paced)
		}
		if tc.paced {
			if d.ComputeRequest == nil || *d.ComputeRequest != 0 || adm.Static[0] == 0 {
				t.Errorf("%s: request %v, admission word %#x; want request 0 and a share", tc.name, d.ComputeRequest, adm.Static[0])
			}
		}
	}
}
