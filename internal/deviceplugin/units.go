package deviceplugin

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/vgpu-dev/vgpu/internal/allocation"
	"github.com/vgpu-dev/vgpu/internal/discover"
)

// A unit is one device of the device-plugin API: "<GPU UUID>::<n>". The
// kubelet counts and hands out units; the plugin maps them back to a GPU.
const unitSep = "::"

func unitID(uuid string, n int) string { return uuid + unitSep + strconv.Itoa(n) }

// unitGPU returns the GPU UUID of a unit ID.
func unitGPU(id string) (string, error) {
	uuid, n, ok := strings.Cut(id, unitSep)
	if !ok || uuid == "" || n == "" {
		return "", fmt.Errorf("device ID %q is not a vgpu unit (<GPU UUID>::<n>)", id)
	}
	if _, err := strconv.Atoi(n); err != nil {
		return "", fmt.Errorf("device ID %q is not a vgpu unit (<GPU UUID>::<n>)", id)
	}
	return uuid, nil
}

// resource is one advertised resource and how a GPU splits into its units.
type resource struct {
	name string // allocation.ResourceMemory or allocation.ResourceCores
	// unitsOf is how many units a GPU offers.
	unitsOf func(g discover.GPU) int
	// fill completes a grant of n units.
	fill func(r *allocation.Record, n int)
}

func memoryResource(unitBytes uint64) resource {
	return resource{
		name:    allocation.ResourceMemory,
		unitsOf: func(g discover.GPU) int { return int(g.MemoryBytes / unitBytes) },
		fill:    func(r *allocation.Record, n int) { r.MemoryBytes = uint64(n) * unitBytes },
	}
}

func coresResource() resource {
	return resource{
		name:    allocation.ResourceCores,
		unitsOf: func(discover.GPU) int { return 100 },
		fill:    func(r *allocation.Record, n int) { r.ComputePercent = n },
	}
}

// byGPU groups unit IDs by GPU UUID, keeping the IDs in order.
func byGPU(ids []string) (map[string][]string, error) {
	m := map[string][]string{}
	for _, id := range ids {
		uuid, err := unitGPU(id)
		if err != nil {
			return nil, err
		}
		m[uuid] = append(m[uuid], id)
	}
	return m, nil
}

// preferred picks size units of res from available (unit IDs by GPU), all on
// one GPU when any has enough: the GPU of the must-include units if there
// are any, else the GPU of the container's other resource if it fits there,
// else the first in the policy's order (placer). Without a GPU that fits it
// returns nil and lets the kubelet choose (Allocate then refuses units that
// span GPUs).
func preferred(pl *placer, res string, gpus []discover.GPU, avail, must map[string][]string, size int) []string {
	if len(must) > 1 {
		return nil
	}
	var fits []discover.GPU
	for _, g := range gpus {
		if len(avail[g.UUID]) < size || (len(must) == 1 && must[g.UUID] == nil) {
			continue
		}
		fits = append(fits, g)
	}
	if len(fits) == 0 {
		return nil
	}
	order := pl.order(res, size, fits)
	if uuid, ok := pl.partner(res); ok {
		for i, g := range order {
			if g.UUID == uuid {
				order = append([]discover.GPU{g}, append(order[:i:i], order[i+1:]...)...)
				break
			}
		}
	}
	g := order[0]
	picked := append([]string(nil), must[g.UUID]...)
	in := map[string]bool{}
	for _, id := range picked {
		in[id] = true
	}
	for _, id := range avail[g.UUID] {
		if len(picked) == size {
			break
		}
		if !in[id] {
			picked = append(picked, id)
		}
	}
	return picked
}
