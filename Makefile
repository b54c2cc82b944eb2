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
CONTRACT_H := lib/cudahook/include/vgpu_contract.h

.PHONY: image helm-tool all build go-build c-build test check unit integration e2e mutants coverage lint lint-tools format serve-test docs-check fuzz vet demo try newcomer clean bench install uninstall generate k8s-tools k8s-test k8s-test-run

all: build

# Each part adds its C outputs to C_TARGETS in its own makefile fragment.
C_TARGETS :=
include test/simgpu/simgpu.mk
include lib/cudahook/cudahook.mk

GO_BINS := vgpu-runtime vgpu-hook vgpu vgpu-node vgpu-discover
# vgpu-runtime starts for every container: built without cgo (static, no
# dynamic loader, no go-nvml), it lists GPUs through vgpu-discover, and only
# for a container that asks for one (docs/design.md, "Start latency").
GO_CGO_BINS := $(filter-out vgpu-runtime,$(GO_BINS))

build: c-build go-build

c-build: $(CONTRACT_H) $(C_TARGETS)

VERSION ?= 0.1.0
# --version of every binary: VERSION and the git commit ("-dirty" with
# uncommitted changes), set with -X; a plain go build says "unknown".
GIT_COMMIT ?= $(shell c=$$(git rev-parse --short=12 HEAD 2>/dev/null) && { git diff --quiet HEAD -- 2>/dev/null && echo $$c || echo $$c-dirty; } || echo unknown)
VERSION_PKG := github.com/vgpu-dev/vgpu/internal/version
GO_LDFLAGS = -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Commit=$(GIT_COMMIT)
# urfave_cli_no_docs: urfave/cli without its man-page generator (go-md2man and
# blackfriday, whose package init every start of the CLI paid).
GO_TAGS := urfave_cli_no_docs

go-build:
	@mkdir -p $(BUILD)/bin
	CGO_ENABLED=1 $(GO) build -trimpath -tags '$(GO_TAGS)' -ldflags '$(GO_LDFLAGS)' -o $(BUILD)/bin/ $(addprefix ./cmd/,$(GO_CGO_BINS))
	CGO_ENABLED=0 $(GO) build -trimpath -tags '$(GO_TAGS)' -ldflags '$(GO_LDFLAGS)' -o $(BUILD)/bin/ ./cmd/vgpu-runtime
	@mkdir -p $(BUILD)/simgpu/bin
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BUILD)/simgpu/bin/nvidia-cuda-mps-control ./test/simgpu/mpsd

# The host<->library contract (internal/contract/contract.go): make generate
# writes vgpu_contract.h from contract.go and, with cgo -godefs (a C compiler),
# internal/contract/zregion.go from lib/cudahook/include/vgpu_region.h. Both
# are committed; TestGenerated (internal/contract/gen) fails when either is
# not what make generate writes now. c-build regenerates the header when
# contract.go changes.
$(CONTRACT_H): internal/contract/contract.go internal/contract/gen/main.go
	$(GO) generate ./internal/contract
	touch $@

generate:
	$(GO) generate ./internal/contract

# Test tiers (CONTRIBUTING.md, docs/testing.md). Untagged tests need neither
# root nor a build: `go test ./...` and make unit run them anywhere. Tags add
# the rest: integration (the built library and simulated GPU in VGPU_BUILD,
# and root), e2e (test/e2e: real runc, docker, containerd, podman; root), k8s
# (with e2e: the Kubernetes binaries of k8s-tools), vgpubench (make bench).
ALL_TAGS := integration e2e k8s vgpubench
# make test's one tag set: every tier but make bench's.
TEST_TAGS := integration e2e k8s

# -race: vet compiles the packages it checks as make test's go test does,
# so that go test finds them in the build cache instead of compiling the
# tree a second time.
vet:
	$(GO) vet -race -tags '$(ALL_TAGS)' ./...

unit:
	$(GO) test -count=1 ./...

# make check: what a change should pass before anything slower, in a few
# minutes on a 2-core machine once the caches are warm (docs/testing.md):
# make lint, make docs-check and the unit tier. No root, no build.
check: lint docs-check unit

# The integration tier (with the unit tests): the built library and the
# simulated GPU, as root; not test/e2e's engines.
integration: build
	VGPU_BUILD=$(BUILD) $(GO) test -tags integration -race -count=1 -timeout 30m ./...

e2e: build
	VGPU_BUILD=$(BUILD) $(GO) test -tags e2e -race -count=1 -timeout 40m ./test/e2e/

# Tests find the built C pieces through VGPU_BUILD. Packages run in parallel:
# no test asserts a real-time share with a tight tolerance (those are figures
# of make bench), so a loaded machine does not fail them (test/under-load.sh).
# One go test with one tag set, so each package is compiled once: the unit,
# integration and e2e tiers and the Kubernetes tests (test/e2e's, sequential
# in their package as every e2e test is, with k8s-tools' binaries).
test: build vet lint docs-check serve-test k8s-tools
	dir=$$(test/k8s/build.sh) && helm=$$(test/k8s/helm/build.sh) && \
	VGPU_K8S_TOOLS=$$dir VGPU_HELM=$$helm VGPU_BUILD=$(BUILD) $(GO) test -tags '$(TEST_TAGS)' -race -count=1 -timeout 40m ./...

# Named source mutations of the decisive lines (test/mutants/list): each is
# applied to a copy of the repository, only what it changes is rebuilt, only
# the tests named to catch it run; fails when one survives or when its source
# string is gone (the code changed: update the entry). About 6 minutes on a
# shared 2-core machine, past what make test should add: .ci/run runs it
# after make test (docs/testing.md).
# MUTANTS=<regexp> runs those whose name matches.
mutants: build
	GO=$(GO) $(GO) run ./test/mutants $(if $(MUTANTS),-only '$(MUTANTS)')

# The Kubernetes end-to-end tests (test/e2e/kubernetes*_test.go, build tags
# e2e and k8s): a real kubelet, control plane (etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager) v1.37.2 and containerd v2.4.2, built from test/k8s/tools by
# test/k8s/build.sh into $$HOME/.cache/vgpu-k8s (keyed by the tools module's
# go.sum; the cold build is the longest part of a first make test, its time
# in docs/results.md; seconds once cached). The
# test gets their directory in VGPU_K8S_TOOLS and fails without it.
k8s-tools:
	test/k8s/build.sh >/dev/null
	test/k8s/helm/build.sh >/dev/null

# make image: the vgpu image (docs/kubernetes.md, "The image") in
# $(BUILD)/image: an OCI layout (oci/) and one tar that ctr images import,
# docker load and podman load take. Built by deploy/image (a module of its
# own, go-containerregistry) without a network or a container daemon, and
# reproducibly: the same commit gives the same digest. The installer is
# static; the other binaries use the node's glibc (cgo), so the image is for
# the architecture of this build (GOARCH).
image: build
	CGO_ENABLED=0 $(GO) build -trimpath -tags '$(GO_TAGS)' -ldflags '$(GO_LDFLAGS)' -o $(BUILD)/bin/vgpu-install ./cmd/vgpu-install
	cd deploy/image && $(GO) run . -bin $(BUILD)/bin -lib $(BUILD)/lib -config $(CURDIR)/configs/config.toml \
		-installer $(BUILD)/bin/vgpu-install -out $(BUILD)/image -version $(VERSION) -commit $(GIT_COMMIT)

# The Helm CLI the chart's tests run (test/k8s/helm/build.sh: its own module
# and cache, $$HOME/.cache/vgpu-helm).
helm-tool:
	test/k8s/helm/build.sh >/dev/null

# The serving benchmark's scheduling, statistics and driver, on the CPU with a
# fake model (no torch; bench/gpu/serve/README.md).
serve-test:
	PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover -s bench/gpu/serve -p 'test_*.py'

k8s-test: build k8s-tools k8s-test-run

# make coverage: the unit, integration and e2e tiers (as make test runs them,
# without -race) with every package's statements counted in one profile,
# then a report per package (test/coverage): it fails for a package below
# 60 % whose reason is not in test/coverage/reasons. Go in the test
# processes only: binaries the e2e tests start and the C library are not
# instrumented. COVER_PKGS picks the test packages (default all).
COVER_PKGS ?= ./...
coverage: build
	@mkdir -p $(BUILD)/coverage
	VGPU_BUILD=$(BUILD) $(GO) test -tags 'integration e2e' -count=1 -timeout 60m -coverpkg=./... \
		-coverprofile=$(BUILD)/coverage/go.out $(COVER_PKGS)
	set -o pipefail; $(GO) run ./test/coverage $(BUILD)/coverage/go.out | tee $(BUILD)/coverage/report.txt

k8s-test-run:
	dir=$$(test/k8s/build.sh) && helm=$$(test/k8s/helm/build.sh) && \
	VGPU_K8S_TOOLS=$$dir VGPU_HELM=$$helm VGPU_BUILD=$(BUILD) $(GO) test -tags 'e2e k8s' -race -count=1 -timeout 30m -run Kubernetes -v ./test/e2e/ ./deploy/helm/ ./internal/install/

demo: build
	./test/demo.sh

# make lint: golangci-lint (.golangci.yml says what and why), shellcheck
# (warnings and errors) and clang-format (.clang-format, test/simgpu's own).
# golangci-lint is built once by go install from the module proxy into
# LINT_BIN, named by its version so that a new pin builds anew; shellcheck
# and clang-format are Debian's (.ci/run installs them). make format applies
# clang-format. The generated contract header is checked by TestGenerated.
GOLANGCI_LINT_VERSION := v2.15.0
LINT_BIN ?= $(HOME)/.cache/vgpu-tools/golangci-lint-$(GOLANGCI_LINT_VERSION)
GOLANGCI_LINT := $(LINT_BIN)/golangci-lint
SHELL_FILES = $(shell git ls-files '*.sh') .ci/run
C_FILES = $(filter-out $(CONTRACT_H),$(shell git ls-files '*.c' '*.h'))

lint: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run ./...
	shellcheck -S warning $(SHELL_FILES)
	clang-format --dry-run --Werror $(C_FILES)

$(GOLANGCI_LINT):
	GOBIN=$(LINT_BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

lint-tools: $(GOLANGCI_LINT)

format:
	clang-format -i $(C_FILES)

# README.md and docs/*.md may state a measured figure only if docs/results.md
# holds it (the rule: docs/results.md, "Measured figures and make docs-check").
# ... and every command block of the pages make newcomer runs is marked
# run or skip (test/newcomer/run.sh --list runs nothing).
docs-check:
	$(GO) run ./test/docscheck
	test/newcomer/run.sh --list >/dev/null

# Without a GPU, with docker and podman: the simulated GPU in a config of its
# own, a runtime wrapper and an image in build/try (docs/try.md).
try: build
	./test/try.sh

# README.md's and docs/try.md's command blocks, verbatim, on this host's own
# engines, as a new user runs them (test/newcomer/run.sh; each block is marked
# run or skip in the page). It changes the host as the pages do (starts
# containerd and dockerd, imports images), so it is a tier of its own:
# .ci/run runs it after make test. About 3 minutes once built.
newcomer:
	./test/newcomer/run.sh

# Every fuzz target for FUZZTIME (default 10s) each; make test runs their seeds.
fuzz: build
	GO=$(GO) VGPU_BUILD=$(BUILD) ./test/fuzz.sh

bench: build
	./bench/run.sh

clean:
	rm -rf $(BUILD)

# ---- install -------------------------------------------------------------------
# make install [PREFIX=/usr/local] [DESTDIR=...]; then vgpu setup docker|containerd|podman.
# The stand-in libraries go to the directory the configuration names
# (library.dir, /usr/lib/vgpu): containers see them at that path, whatever PREFIX is.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share
SYSCONFDIR ?= /etc
VGPU_LIBDIR ?= /usr/lib/vgpu
# podman's hooks directories. Unset, make install writes where the podman on
# this machine reads them (vgpu setup podman asks its containers.conf, else
# both /usr/share/containers/oci/hooks.d, the only one podman 4 reads, and
# /etc/containers/oci/hooks.d); with DESTDIR it writes both defaults. Set
# HOOKSDIRS to name them (a list).
HOOKSDIRS ?=
HOOKS_FLAGS = $(if $(HOOKSDIRS),$(foreach d,$(HOOKSDIRS),--hooks-dir $(DESTDIR)$(d)),$(if $(DESTDIR),--hooks-dir $(DESTDIR)/usr/share/containers/oci/hooks.d --hooks-dir $(DESTDIR)/etc/containers/oci/hooks.d))
HOOK_FILES := vgpu-createcontainer.json vgpu-poststop.json
# The systemd unit goes where systemd reads units (systemd-analyze
# unit-paths): $(PREFIX)/lib/systemd/system for /usr/local (the
# administrator's packages) and /usr, else /etc/systemd/system. Its paths
# follow BINDIR, SYSCONFDIR and DATADIR; its Documentation= is node.md,
# installed beside it in $(DATADIR)/vgpu/docs.
SYSTEMDUNITDIR ?= $(if $(filter /usr /usr/local,$(PREFIX)),$(PREFIX)/lib/systemd/system,/etc/systemd/system)
VGPU_LIBS := libvgpu-cuda.so libvgpu-nvml.so
INSTALL ?= install

install: build
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(VGPU_LIBDIR) $(DESTDIR)$(DATADIR)/vgpu/k8s $(DESTDIR)$(SYSCONFDIR)/vgpu
	$(INSTALL) -m 0755 $(addprefix $(BUILD)/bin/,$(GO_BINS)) $(DESTDIR)$(BINDIR)/
	@# Versioned files, then the unversioned names the configuration and ld.so.preload use.
	for l in $(VGPU_LIBS); do \
		$(INSTALL) -m 0755 $(BUILD)/lib/$$l $(DESTDIR)$(VGPU_LIBDIR)/.$$l.$(VERSION).tmp && \
		mv -f $(DESTDIR)$(VGPU_LIBDIR)/.$$l.$(VERSION).tmp $(DESTDIR)$(VGPU_LIBDIR)/$$l.$(VERSION) && \
		ln -sfn $$l.$(VERSION) $(DESTDIR)$(VGPU_LIBDIR)/$$l || exit 1; \
	done
	sed 's|^dir = "/usr/lib/vgpu"|dir = "$(VGPU_LIBDIR)"|' configs/config.toml > $(DESTDIR)$(DATADIR)/vgpu/config.toml
	chmod 0644 $(DESTDIR)$(DATADIR)/vgpu/config.toml
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/vgpu/config.toml ]; then \
		echo "keeping the existing $(DESTDIR)$(SYSCONFDIR)/vgpu/config.toml (the shipped one is $(DESTDIR)$(DATADIR)/vgpu/config.toml)"; \
	else \
		$(INSTALL) -m 0644 $(DESTDIR)$(DATADIR)/vgpu/config.toml $(DESTDIR)$(SYSCONFDIR)/vgpu/config.toml; \
	fi
	$(INSTALL) -m 0644 configs/k8s/*.yaml $(DESTDIR)$(DATADIR)/vgpu/k8s/
	$(INSTALL) -d $(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(DATADIR)/vgpu/docs
	$(INSTALL) -m 0644 docs/node.md $(DESTDIR)$(DATADIR)/vgpu/docs/
	sed -e 's|/usr/local/bin/|$(BINDIR)/|g' -e 's|/etc/vgpu/|$(SYSCONFDIR)/vgpu/|g' -e 's|/usr/local/share/|$(DATADIR)/|g' \
		configs/vgpu-node.service > $(DESTDIR)$(SYSTEMDUNITDIR)/vgpu-node.service
	chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/vgpu-node.service
	$(BUILD)/bin/vgpu setup podman $(HOOKS_FLAGS) --hook-path $(BINDIR)/vgpu-hook \
		--vgpu-config $(SYSCONFDIR)/vgpu/config.toml
	@echo "installed vgpu $(VERSION). Next: vgpu setup docker | vgpu setup containerd | vgpu setup podman (or vgpu cdi generate); host enforcement: systemctl enable --now vgpu-node ($(SYSTEMDUNITDIR)/vgpu-node.service)"

uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(GO_BINS))
	for l in $(VGPU_LIBS); do rm -f $(DESTDIR)$(VGPU_LIBDIR)/$$l $(DESTDIR)$(VGPU_LIBDIR)/$$l.$(VERSION); done
	-rmdir $(DESTDIR)$(VGPU_LIBDIR) 2>/dev/null
	@# The hooks, from the same directories install wrote (vgpu setup podman
	@# --remove asks podman again), then their .vgpu.bak copies.
	@if [ -x $(BUILD)/bin/vgpu ]; then $(BUILD)/bin/vgpu setup podman --remove $(HOOKS_FLAGS) >/dev/null; fi
	for d in $(if $(HOOKSDIRS),$(addprefix $(DESTDIR),$(HOOKSDIRS)),$(DESTDIR)/usr/share/containers/oci/hooks.d $(DESTDIR)/etc/containers/oci/hooks.d); do \
		for f in $(HOOK_FILES); do rm -f $$d/$$f $$d/$$f.vgpu.bak; done; \
		rmdir $$d $$(dirname $$d) $$(dirname $$(dirname $$d)) 2>/dev/null || true; \
	done
	@# The configuration goes only when it is still the shipped one.
	@if cmp -s $(DESTDIR)$(SYSCONFDIR)/vgpu/config.toml $(DESTDIR)$(DATADIR)/vgpu/config.toml; then \
		rm -f $(DESTDIR)$(SYSCONFDIR)/vgpu/config.toml; rmdir $(DESTDIR)$(SYSCONFDIR)/vgpu 2>/dev/null || true; \
	elif [ -e $(DESTDIR)$(SYSCONFDIR)/vgpu/config.toml ]; then \
		echo "keeping $(DESTDIR)$(SYSCONFDIR)/vgpu/config.toml (changed since install)"; \
	fi
	rm -f $(DESTDIR)$(SYSTEMDUNITDIR)/vgpu-node.service
	rm -rf $(DESTDIR)$(DATADIR)/vgpu
	@echo "uninstalled. Engine configuration is not touched: vgpu setup docker|containerd|podman --remove (before uninstalling) takes vgpu out of it."
