# vgpu build. `make demo` and `make test` are the whole set-up (see README.md).
SHELL := /bin/bash
BUILD ?= $(CURDIR)/build
CC ?= gcc
GO ?= go
CWARN := -Wall -Wextra -Werror
CFLAGS_COMMON := -O2 -g -fPIC -std=gnu11 $(CWARN)
# go-nvml's cgo prologue calls functions that CUDA 13 headers mark deprecated.
export CGO_CFLAGS := -O2 -Wno-deprecated-declarations
export BUILD

.PHONY: all build go-build c-build test unit-test e2e-test vet demo clean bench

all: build

# Each part adds its C outputs to C_TARGETS in its own makefile fragment.
C_TARGETS :=
include test/simgpu/simgpu.mk
include lib/cudahook/cudahook.mk

GO_BINS := vgpu-runtime vgpu-hook vgpu

build: c-build go-build

c-build: $(C_TARGETS)

go-build:
	@mkdir -p $(BUILD)/bin
	CGO_ENABLED=1 $(GO) build -trimpath -o $(BUILD)/bin/ $(addprefix ./cmd/,$(GO_BINS))

vet:
	$(GO) vet ./...

# Tests find the built C pieces through VGPU_BUILD.
test: build vet
	VGPU_BUILD=$(BUILD) $(GO) test -race -count=1 -timeout 40m ./...

demo: build
	./test/demo.sh

bench: build
	./bench/run.sh

clean:
	rm -rf $(BUILD)
