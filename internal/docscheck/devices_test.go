package docscheck

import (
	"strings"
	"testing"
)

const wantDevices = "--device /dev/nvidiactl --device /dev/nvidia-uvm --device /dev/nvidia-uvm-tools --device /dev/nvidia0"

// A page listing a node too few (the hook then refuses the container) fails,
// naming the file, the line and the list to write; the full list passes,
// whatever GPU it names and however the shell line is broken.
func TestDeviceLists(t *testing.T) {
	root := repo(t, map[string]string{
		"README.md": "podman run \\\n  --device /dev/nvidiactl --device /dev/nvidia-uvm \\\n  --device /dev/nvidia-uvm-tools --device /dev/nvidia3 image\n",
		"docs/usage.md": "intro\n\n`podman run --device /dev/nvidiactl --device /dev/nvidia-uvm --device /dev/nvidia0 …`\n" +
			"and CDI: `--device vgpu.io/gpu=0`\n",
	})
	probs, err := DeviceLists(root, wantDevices)
	if err != nil {
		t.Fatal(err)
	}
	if len(probs) != 1 || probs[0].File != "docs/usage.md" || probs[0].Line != 3 {
		t.Fatalf("got %v, want one problem at docs/usage.md:3", probs)
	}
	if msg := probs[0].Error(); !strings.Contains(msg, "--device /dev/nvidia-uvm-tools") || !strings.Contains(msg, "docs/usage.md:3") {
		t.Errorf("message does not say what to write: %s", msg)
	}
}
