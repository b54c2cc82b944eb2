package enforce

import (
	"testing"
	"time"
)

// On a spatial GPU a tenant's process that neither the driver (Proc.MPS)
// nor the MPS server lists as a client is killed once it has been seen so
// for MPSGrace; clients are never touched, nor is anything while the daemon
// does not answer (no client list), nor a process outside any container.
func TestMPSNonClientIsKilled(t *testing.T) {
	p := New(DefaultConfig())
	now := time.Unix(1_700_000_000, 0)
	c := Container{ID: "a", Limits: map[string]Limit{gpu0: {MemoryBytes: 4 * gib, ComputePct: 100, Spatial: true}}}
	procs := []Proc{
		{HostPID: 10, GPU: gpu0, UsedBytes: gib, Container: "a"}, // a client
		{HostPID: 11, GPU: gpu0, UsedBytes: gib, Container: "a"}, // around MPS
		{HostPID: 12, GPU: gpu0, UsedBytes: gib},                 // the host's (the MPS server itself)
	}
	clients := map[string]map[int]bool{gpu0: {10: true}}
	var kills []Action
	step := func(cl map[string]map[int]bool) {
		for _, a := range p.Step(Input{Now: now, Containers: []Container{c}, Procs: procs, Clients: cl}) {
			if a.Kind == Kill {
				kills = append(kills, a)
			}
		}
		now = now.Add(100 * time.Millisecond)
	}
	// the daemon does not answer: nothing judged, however long
	for i := 0; i < 20; i++ {
		step(nil)
	}
	if len(kills) != 0 {
		t.Fatalf("acted without a client list: %v", kills)
	}
	grace := int(DefaultConfig().MPSGrace / (100 * time.Millisecond))
	for i := 0; i < grace; i++ {
		step(clients)
	}
	if len(kills) != 0 {
		t.Fatalf("killed within grace: %v", kills)
	}
	for i := 0; i < 3; i++ {
		step(clients)
	}
	if len(kills) != 1 || kills[0].PID != 11 || kills[0].Reason != ReasonMPS || kills[0].Container != "a" {
		t.Fatalf("kills %v, want pid 11 once (mps)", kills)
	}
	// a process that became a client meanwhile is not killed
	procs[1] = Proc{HostPID: 13, GPU: gpu0, UsedBytes: gib, Container: "a"}
	step(clients)
	clients[gpu0][13] = true
	for i := 0; i < 10; i++ {
		step(clients)
	}
	if len(kills) != 1 {
		t.Errorf("a client was killed: %v", kills[1:])
	}
	// a client the driver lists with an MPS context, not (yet) in the
	// server's list (the real daemon answers no command while it starts
	// the server): never killed
	procs[1] = Proc{HostPID: 15, GPU: gpu0, UsedBytes: gib, Container: "a", MPS: true}
	for i := 0; i < 3*grace; i++ {
		step(clients)
	}
	if len(kills) != 1 {
		t.Errorf("a client by the driver's list was killed: %v", kills[1:])
	}
	// the same process on a time-sliced GPU is not judged by the rule
	c.Limits[gpu0] = Limit{MemoryBytes: 4 * gib, ComputePct: 100}
	procs = append(procs, Proc{HostPID: 14, GPU: gpu0, Container: "a"})
	for i := 0; i < 10; i++ {
		step(clients)
	}
	if len(kills) != 1 {
		t.Errorf("time-sliced GPU: %v", kills[1:])
	}
}
