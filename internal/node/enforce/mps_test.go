package enforce

import (
	"testing"
	"time"
)

// On a spatial GPU a tenant's process that the driver does not list as an
// MPS client (Proc.MPS) is killed once it has been seen so for MPSGrace,
// not a round before; clients are never touched, nor is a process outside
// any container, nor one on a time-sliced GPU. What the control daemon
// says (its socket's client list, or nothing while it is down) changes
// nothing: the policy has only the driver's word.
func TestMPSNonClientIsKilled(t *testing.T) {
	p := New(DefaultConfig())
	now := time.Unix(1_700_000_000, 0)
	c := Container{ID: "a", Limits: map[string]Limit{gpu0: {MemoryBytes: 4 * gib, ComputePct: 100, Spatial: true}}}
	procs := []Proc{
		{HostPID: 10, GPU: gpu0, UsedBytes: gib, Container: "a", MPS: true}, // a client
		{HostPID: 11, GPU: gpu0, UsedBytes: gib, Container: "a"},            // around MPS
		{HostPID: 12, GPU: gpu0, UsedBytes: gib},                            // the host's (the MPS server itself)
	}
	var kills []Action
	step := func() {
		for _, a := range p.Step(Input{Now: now, Containers: []Container{c}, Procs: procs}) {
			if a.Kind == Kill {
				kills = append(kills, a)
			}
		}
		now = now.Add(100 * time.Millisecond)
	}
	grace := int(DefaultConfig().MPSGrace / (100 * time.Millisecond))
	for i := 0; i < grace; i++ {
		step()
	}
	if len(kills) != 0 {
		t.Fatalf("killed within grace: %v", kills)
	}
	step()
	if len(kills) != 1 || kills[0].PID != 11 || kills[0].Reason != ReasonMPS || kills[0].Container != "a" {
		t.Fatalf("kills %v, want pid 11 once (mps) at the grace", kills)
	}
	// a process that became a client meanwhile (the driver lists it) is
	// not killed
	procs[1] = Proc{HostPID: 13, GPU: gpu0, UsedBytes: gib, Container: "a"}
	step()
	procs[1].MPS = true
	for i := 0; i < 3*grace; i++ {
		step()
	}
	if len(kills) != 1 {
		t.Errorf("a client was killed: %v", kills[1:])
	}
	// the same process on a time-sliced GPU is not judged by the rule
	c.Limits[gpu0] = Limit{MemoryBytes: 4 * gib, ComputePct: 100}
	procs = append(procs, Proc{HostPID: 14, GPU: gpu0, Container: "a"})
	for i := 0; i < 3*grace; i++ {
		step()
	}
	if len(kills) != 1 {
		t.Errorf("time-sliced GPU: %v", kills[1:])
	}
}

// A non-client that keeps coming back (respawned under a new pid after each
// kill) is killed whole at the RepeatKills-th round of MPS kills within
// RepeatWindow, as a memory bypass is; RepeatKills - 1 rounds kill only the
// process.
func TestMPSRespawnKilledWhole(t *testing.T) {
	cfg := DefaultConfig()
	p := New(cfg)
	now := time.Unix(1_700_000_000, 0)
	c := Container{ID: "a", Cgroup: "/runc/a", Limits: map[string]Limit{gpu0: {MemoryBytes: 4 * gib, ComputePct: 100, Spatial: true}}}
	pid := 100
	var kills, whole []Action
	for round := 0; now.Before(time.Unix(1_700_000_000, 0).Add(cfg.RepeatWindow)) && len(whole) == 0; round++ {
		procs := []Proc{{HostPID: pid, GPU: gpu0, UsedBytes: gib, Container: "a"}}
		for _, a := range p.Step(Input{Now: now, Containers: []Container{c}, Procs: procs}) {
			switch a.Kind {
			case Kill:
				kills = append(kills, a)
				pid++ // it comes back under a new pid
			case KillAll:
				whole = append(whole, a)
			}
		}
		now = now.Add(100 * time.Millisecond)
	}
	if len(kills) != cfg.RepeatKills-1 {
		t.Errorf("%d single kills before the whole container, want %d: %v", len(kills), cfg.RepeatKills-1, kills)
	}
	if len(whole) != 1 || whole[0].Container != "a" || whole[0].Cgroup != "/runc/a" || whole[0].Reason != ReasonRepeat {
		t.Fatalf("a respawning non-client within %v: kill-container %v, want one of a", cfg.RepeatWindow, whole)
	}
}
