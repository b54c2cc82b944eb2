module github.com/vgpu-dev/vgpu

go 1.26.8
