package shim

import (
	"fmt"
	"strings"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/request"
)

// nvidiaEnvIgnored is the warning for a container that asks for no GPU but
// carries NVIDIA_VISIBLE_DEVICES (the NVIDIA toolkit's and HAMi's way to ask;
// CUDA images bake it in), which this host does not read: the container runs
// without GPUs, and the runtime's log says why and what to write instead.
// "" when there is nothing to say.
func nvidiaEnvIgnored(env []string, cfg *config.Config) string {
	if cfg.AcceptNvidiaVisibleDevicesEnvvar {
		return ""
	}
	var value string
	found := false
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == request.EnvNvidiaVisibleDevices {
			value, found = v, true
		}
	}
	switch {
	case !found, value == "", value == "void", value == "none":
		return ""
	}
	return fmt.Sprintf("%s=%q grants no GPU here (images set it, so vgpu does not read it; accept_nvidia_visible_devices_envvar is off): the container runs without GPUs; ask with %s=%s", request.EnvNvidiaVisibleDevices, value, request.EnvVisibleDevices, value)
}
