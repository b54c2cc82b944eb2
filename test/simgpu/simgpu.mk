# Simulated GPU (test/simgpu): libcuda + libnvidia-ml + nvidia-smi + a default driver root.
# Included by the top Makefile (BUILD, CC, CFLAGS_COMMON, C_TARGETS come from it).
SIMGPU_SRC := test/simgpu/src
SIMGPU_OUT := $(BUILD)/simgpu
SIMGPU_VER := 580.95.05
SIMGPU_CFLAGS := $(CFLAGS_COMMON) -fvisibility=hidden -pthread -Ilib/cudahook/include -I$(SIMGPU_SRC)
# -Bsymbolic-functions: our own table (cuGetProcAddress) must hand out our own
# addresses even if an interposer defines the same names in the global scope.
SIMGPU_LDFLAGS := -shared -pthread -Wl,-Bsymbolic-functions -Wl,-z,defs -Wl,-z,now
SIMGPU_HDRS := $(wildcard $(SIMGPU_SRC)/*.h) lib/cudahook/include/cuda_abi.h lib/cudahook/include/nvml_abi.h
SIMGPU_COMMON := $(SIMGPU_SRC)/config.c $(SIMGPU_SRC)/state.c
SIMGPU_CUDA_SRCS := $(SIMGPU_COMMON) $(addprefix $(SIMGPU_SRC)/,proc.c device.c context.c memory.c copy.c exec.c procaddr.c mps.c checkpoint.c)
SIMGPU_NVML_SRCS := $(SIMGPU_COMMON) $(SIMGPU_SRC)/nvml.c

SIMGPU_LIBCUDA := $(SIMGPU_OUT)/lib/libcuda.so.$(SIMGPU_VER)
SIMGPU_LIBNVML := $(SIMGPU_OUT)/lib/libnvidia-ml.so.$(SIMGPU_VER)
SIMGPU_SMI := $(SIMGPU_OUT)/bin/nvidia-smi
SIMGPU_ROOT_STAMP := $(SIMGPU_OUT)/root/.stamp

# A driver of the r615 branch: the same sources, with NVML's per-cgroup
# memory limits (nvmlDevice{Set,Get}MemoryLimits_v1). simroot.Options.Driver
# picks it (docs/driver-limits.md).
SIMGPU_R615_VER := 615.00.00
SIMGPU_R615_CFLAGS := -DSIM_MEMORY_LIMITS '-DSIM_DRIVER_VERSION_STR="$(SIMGPU_R615_VER)"' -DSIM_CUDA_VERSION=13040
SIMGPU_R615_LIBCUDA := $(SIMGPU_OUT)/r615/lib/libcuda.so.$(SIMGPU_R615_VER)
SIMGPU_R615_LIBNVML := $(SIMGPU_OUT)/r615/lib/libnvidia-ml.so.$(SIMGPU_R615_VER)

C_TARGETS += $(SIMGPU_LIBCUDA) $(SIMGPU_LIBNVML) $(SIMGPU_SMI) $(SIMGPU_ROOT_STAMP) $(SIMGPU_R615_LIBCUDA) $(SIMGPU_R615_LIBNVML)

$(SIMGPU_R615_LIBCUDA): $(SIMGPU_CUDA_SRCS) $(SIMGPU_HDRS) test/simgpu/simgpu.mk
	@mkdir -p $(@D)
	$(CC) $(SIMGPU_CFLAGS) $(SIMGPU_R615_CFLAGS) $(SIMGPU_LDFLAGS) -Wl,-soname,libcuda.so.1 -o $@ $(SIMGPU_CUDA_SRCS) -ldl

$(SIMGPU_R615_LIBNVML): $(SIMGPU_NVML_SRCS) $(SIMGPU_HDRS) test/simgpu/simgpu.mk
	@mkdir -p $(@D)
	$(CC) $(SIMGPU_CFLAGS) $(SIMGPU_R615_CFLAGS) $(SIMGPU_LDFLAGS) -Wl,-soname,libnvidia-ml.so.1 -o $@ $(SIMGPU_NVML_SRCS) -ldl

$(SIMGPU_LIBCUDA): $(SIMGPU_CUDA_SRCS) $(SIMGPU_HDRS) test/simgpu/simgpu.mk
	@mkdir -p $(@D)
	$(CC) $(SIMGPU_CFLAGS) $(SIMGPU_LDFLAGS) -Wl,-soname,libcuda.so.1 -o $@ $(SIMGPU_CUDA_SRCS) -ldl
	ln -sf libcuda.so.$(SIMGPU_VER) $(@D)/libcuda.so.1
	ln -sf libcuda.so.1 $(@D)/libcuda.so

$(SIMGPU_LIBNVML): $(SIMGPU_NVML_SRCS) $(SIMGPU_HDRS) test/simgpu/simgpu.mk
	@mkdir -p $(@D)
	$(CC) $(SIMGPU_CFLAGS) $(SIMGPU_LDFLAGS) -Wl,-soname,libnvidia-ml.so.1 -o $@ $(SIMGPU_NVML_SRCS) -ldl
	ln -sf libnvidia-ml.so.$(SIMGPU_VER) $(@D)/libnvidia-ml.so.1
	ln -sf libnvidia-ml.so.1 $(@D)/libnvidia-ml.so

# RUNPATH lets <root>/usr/bin/nvidia-smi find <root>/usr/lib/x86_64-linux-gnu;
# LD_LIBRARY_PATH and ld.so.preload still come first, so interposers catch it.
$(SIMGPU_SMI): $(SIMGPU_SRC)/smi.c $(SIMGPU_HDRS) test/simgpu/simgpu.mk
	@mkdir -p $(@D)
	$(CC) $(SIMGPU_CFLAGS) -o $@ $(SIMGPU_SRC)/smi.c -ldl '-Wl,-rpath,$$ORIGIN/../lib/x86_64-linux-gnu' -Wl,--enable-new-dtags

# Default driver root: one 16 GiB device. Device nodes are real char nodes when
# we may mknod (root), regular files otherwise (the documented equivalent).
$(SIMGPU_ROOT_STAMP): $(SIMGPU_LIBCUDA) $(SIMGPU_LIBNVML) $(SIMGPU_SMI)
	rm -rf $(SIMGPU_OUT)/root
	mkdir -p $(SIMGPU_OUT)/root/usr/lib/x86_64-linux-gnu $(SIMGPU_OUT)/root/usr/bin $(SIMGPU_OUT)/root/run/simgpu $(SIMGPU_OUT)/root/dev
	chmod 1777 $(SIMGPU_OUT)/root/run/simgpu
	cp $(SIMGPU_LIBCUDA) $(SIMGPU_LIBNVML) $(SIMGPU_OUT)/root/usr/lib/x86_64-linux-gnu/
	cd $(SIMGPU_OUT)/root/usr/lib/x86_64-linux-gnu && ln -sf libcuda.so.$(SIMGPU_VER) libcuda.so.1 && ln -sf libcuda.so.1 libcuda.so \
		&& ln -sf libnvidia-ml.so.$(SIMGPU_VER) libnvidia-ml.so.1 && ln -sf libnvidia-ml.so.1 libnvidia-ml.so
	cp $(SIMGPU_SMI) $(SIMGPU_OUT)/root/usr/bin/nvidia-smi
	printf 'simgpu 1\ncontext-memory 268435456\ndevice name=NVIDIA_H100_(simulated) uuid=GPU-5e3b6a2e-0000-4000-8000-000000000000 memory=17179869184 sms=132 pci=0000:19:00.0 minor=0\n' > $(SIMGPU_OUT)/root/run/simgpu/config
	cd $(SIMGPU_OUT)/root/dev && for n in nvidia0:60:0 nvidiactl:60:255 nvidia-uvm:61:0 nvidia-uvm-tools:61:1; do \
		IFS=: read f ma mi <<< "$$n"; \
		mknod -m 666 $$f c $$ma $$mi 2>/dev/null && { cat $$f >/dev/null 2>&1; [ -c $$f ] && ! ( exec 3<$$f ) 2>&1 | grep -q 'not permitted'; } \
			|| { rm -f $$f; : > $$f; chmod 666 $$f; }; \
	done
	touch $@
