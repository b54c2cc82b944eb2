package status

import (
	"encoding/json"

	"github.com/vgpu-dev/vgpu/internal/inject"
)

func parseInfo(b []byte) (*inject.ContainerInfo, error) {
	var i inject.ContainerInfo
	if err := json.Unmarshal(b, &i); err != nil {
		return nil, err
	}
	return &i, nil
}
