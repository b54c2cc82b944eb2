package dra

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/discover"
)

// listed is an inventory whose GPUs the test changes.
type listed struct {
	mu   sync.Mutex
	gpus []discover.GPU
	err  error
}

func (l *listed) GPUs() ([]discover.GPU, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]discover.GPU(nil), l.gpus...), l.err
}

func (l *listed) set(gpus []discover.GPU, err error) {
	l.mu.Lock()
	l.gpus, l.err = gpus, err
	l.mu.Unlock()
}

// Health: every GPU seen is reported, Healthy while NVML lists it; one that
// disappears, or an inventory that fails, turns Unhealthy.
func TestWatchHealthStatus(t *testing.T) {
	a, b := discover.GPU{Index: 0, UUID: "GPU-a"}, discover.GPU{Index: 1, UUID: "GPU-b"}
	inv := &listed{gpus: []discover.GPU{a, b}}
	d, err := New(Options{NodeName: "node-a", Config: config.Default(), Inventory: inv, HealthInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error, 1)
	go func() { done <- d.WatchHealthStatus(ctx, reports) }()
	health := func() map[string]kubeletplugin.HealthStatus {
		r := <-reports
		out := map[string]kubeletplugin.HealthStatus{}
		for _, h := range r.Devices {
			if h.PoolName != "node-a" || h.LastUpdated.IsZero() {
				t.Errorf("report %+v: want pool node-a and a time", h)
			}
			out[h.DeviceName] = h.Health
		}
		return out
	}
	if h := health(); len(h) != 2 || h["gpu-0"] != kubeletplugin.HealthStatusHealthy || h["gpu-1"] != kubeletplugin.HealthStatusHealthy {
		t.Fatalf("first report %v: want gpu-0 and gpu-1 Healthy", h)
	}
	inv.set([]discover.GPU{a}, nil)
	for deadline := time.Now().Add(10 * time.Second); ; {
		h := health()
		if h["gpu-1"] == kubeletplugin.HealthStatusUnhealthy && h["gpu-0"] == kubeletplugin.HealthStatusHealthy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("report %v: want gpu-1 Unhealthy once NVML no longer lists it", h)
		}
	}
	inv.set(nil, errors.New("nvml gone"))
	for deadline := time.Now().Add(10 * time.Second); ; {
		h := health()
		if h["gpu-0"] == kubeletplugin.HealthStatusUnhealthy && h["gpu-1"] == kubeletplugin.HealthStatusUnhealthy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("report %v: want every GPU Unhealthy when the inventory fails", h)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("WatchHealthStatus after cancel: %v", err)
	}
}
