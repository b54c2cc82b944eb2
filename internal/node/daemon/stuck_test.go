package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
)

// hangingFeed is a driver whose every read hangs until released.
type hangingFeed struct{ release chan struct{} }

func (f hangingFeed) Read() ([]nvmlfeed.Sample, error) { <-f.release; return nil, nil }
func (hangingFeed) Close() error                       { return nil }

// Told to stop while a round hangs, Run returns ErrRoundStuck within its
// grace and thaws what the durable record says it froze; the health check
// fails once the last round is old, and passes while rounds finish.
func TestRunStopsAndThawsWhileARoundHangs(t *testing.T) {
	dir := t.TempDir()
	state, cg := filepath.Join(dir, "state"), filepath.Join(dir, "cg")
	frozen := filepath.Join(cg, "tenant")
	if err := os.MkdirAll(frozen, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(frozen, "cgroup.freeze"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Never released: a round let go after Run returned would write into
	// the state directory while the test's clean-up removes it.
	f := hangingFeed{release: make(chan struct{})}
	d, err := New(Options{StateDir: state, CgroupRoot: cg, Policy: enforce.DefaultConfig(), Source: f, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// what an earlier round froze, as the freezer records it
	if err := d.frz.Freeze("/tenant"); err != nil {
		t.Fatal(err)
	}
	if !d.Healthy(time.Now()) {
		t.Fatal("unhealthy right after New")
	}
	if d.Healthy(time.Now().Add(time.Minute)) {
		t.Fatal("healthy a minute after New with no round finished")
	}
	ctx, cancel := context.WithCancel(context.Background())
	ret := make(chan error, 1)
	go func() { ret <- d.Run(ctx) }()
	cancel()
	select {
	case err := <-ret:
		if !errors.Is(err, ErrRoundStuck) {
			t.Fatalf("Run = %v, want %v", err, ErrRoundStuck)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return while its round hangs")
	}
	b, err := os.ReadFile(filepath.Join(frozen, "cgroup.freeze"))
	if err != nil || string(b) != "0" && string(b) != "0\n" {
		t.Fatalf("cgroup.freeze after stop = %q, %v; want thawed", b, err)
	}
}
