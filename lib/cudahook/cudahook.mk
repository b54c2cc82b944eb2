# lib/cudahook: the in-container stand-ins libvgpu-cuda.so and libvgpu-nvml.so.
# Included by the top Makefile (BUILD, CC, CFLAGS_COMMON, C_TARGETS).

CUDAHOOK_DIR := lib/cudahook
CUDAHOOK_GEN := $(BUILD)/cudahook/gen
CUDAHOOK_OBJ := $(BUILD)/cudahook/obj
# The simulator's libraries (test/simgpu/simgpu.mk, included before us): their
# exports are merged into ours so that test programs always link.
CUDAHOOK_SIM_CUDA := $(SIMGPU_LIBCUDA)
CUDAHOOK_SIM_NVML := $(SIMGPU_LIBNVML)

CUDAHOOK_COMMON_SRC := log.c quota.c region.c loader.c
CUDAHOOK_CUDA_SRC := $(CUDAHOOK_COMMON_SRC) share.c procaddr.c ptrtab.c devmap.c account.c alloc.c pools.c vmm.c \
	graphmem.c memview.c probe.c context.c limits.c modules.c capture.c pacer.c order.c borrow.c measure.c launch.c \
	spatial.c mps.c
CUDAHOOK_NVML_SRC := $(CUDAHOOK_COMMON_SRC) nvml.c pidmap.c
CUDAHOOK_HDRS := $(wildcard $(CUDAHOOK_DIR)/src/*.h $(CUDAHOOK_DIR)/include/*.h)

CUDAHOOK_CFLAGS := $(CFLAGS_COMMON) -fvisibility=hidden -D_GNU_SOURCE -include $(CUDAHOOK_DIR)/src/compat.h \
	-I$(CUDAHOOK_DIR)/src -I$(CUDAHOOK_DIR)/include -I$(CUDAHOOK_GEN)
# --no-as-needed + the -l:SONAME forms: glibc >= 2.34 has only empty libdl.a etc.,
# but in an old image dlopen/pthread_* live in libdl/libpthread/librt, so keep them NEEDED;
# -Bsymbolic: our own calls and addresses of our wrappers bind to us.
CUDAHOOK_LDFLAGS := -shared -Wl,-Bsymbolic -Wl,-z,defs -Wl,--no-as-needed -ldl -lpthread -lrt \
	-l:libdl.so.2 -l:libpthread.so.0 -l:librt.so.1

CUDAHOOK_CUDA_LIB := $(BUILD)/lib/libvgpu-cuda.so
CUDAHOOK_NVML_LIB := $(BUILD)/lib/libvgpu-nvml.so

$(CUDAHOOK_GEN)/cuda_table.h $(CUDAHOOK_GEN)/cuda_tramp.S: $(CUDAHOOK_DIR)/gen-stubs.sh $(CUDAHOOK_DIR)/cudahook.mk $(CUDAHOOK_DIR)/src/hooks.h \
		$(wildcard $(CUDAHOOK_DIR)/symbols/libcuda.syms) $(CUDAHOOK_SIM_CUDA)
	$(CUDAHOOK_DIR)/gen-stubs.sh cuda $(CUDAHOOK_GEN) $(CUDAHOOK_DIR)/src/hooks.h $(CUDAHOOK_DIR)/symbols/libcuda.syms \
		"$(CUDAHOOK_SIM_CUDA)"

$(CUDAHOOK_GEN)/nvml_table.h $(CUDAHOOK_GEN)/nvml_tramp.S: $(CUDAHOOK_DIR)/gen-stubs.sh $(CUDAHOOK_DIR)/cudahook.mk $(CUDAHOOK_DIR)/src/hooks.h \
		$(wildcard $(CUDAHOOK_DIR)/symbols/libnvidia-ml*.syms) $(CUDAHOOK_SIM_NVML)
	$(CUDAHOOK_DIR)/gen-stubs.sh nvml $(CUDAHOOK_GEN) $(CUDAHOOK_DIR)/src/hooks.h $(CUDAHOOK_DIR)/symbols/libnvidia-ml.syms \
		"$(CUDAHOOK_SIM_NVML)" $(CUDAHOOK_DIR)/symbols/libnvidia-ml.header.syms

$(CUDAHOOK_OBJ)/cuda/%.o: $(CUDAHOOK_DIR)/src/%.c $(CUDAHOOK_HDRS) $(CUDAHOOK_GEN)/cuda_table.h
	@mkdir -p $(dir $@)
	$(CC) $(CUDAHOOK_CFLAGS) -DVGPU_CUDA -c -o $@ $<

$(CUDAHOOK_OBJ)/nvml/%.o: $(CUDAHOOK_DIR)/src/%.c $(CUDAHOOK_HDRS) $(CUDAHOOK_GEN)/nvml_table.h
	@mkdir -p $(dir $@)
	$(CC) $(CUDAHOOK_CFLAGS) -DVGPU_NVML -c -o $@ $<

$(CUDAHOOK_CUDA_LIB): $(addprefix $(CUDAHOOK_OBJ)/cuda/,$(CUDAHOOK_CUDA_SRC:.c=.o)) $(CUDAHOOK_GEN)/cuda_tramp.S $(CUDAHOOK_DIR)/src/lazy.S
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -o $@ $(filter %.o %.S,$^) -Wl,-soname,libcuda.so.1 $(CUDAHOOK_LDFLAGS)

$(CUDAHOOK_NVML_LIB): $(addprefix $(CUDAHOOK_OBJ)/nvml/,$(CUDAHOOK_NVML_SRC:.c=.o)) $(CUDAHOOK_GEN)/nvml_tramp.S $(CUDAHOOK_DIR)/src/lazy.S
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -o $@ $(filter %.o %.S,$^) -Wl,-soname,libnvidia-ml.so.1 $(CUDAHOOK_LDFLAGS)

C_TARGETS += $(CUDAHOOK_CUDA_LIB) $(CUDAHOOK_NVML_LIB)

# The pacer's, the order's and borrowing's deterministic test
# (testdata/pacer_test.c): pacer.c, order.c and borrow.c alone, no driver;
# TestPacer runs it.
CUDAHOOK_PACER_TEST := $(BUILD)/cudahook/pacer_test
$(CUDAHOOK_PACER_TEST): $(CUDAHOOK_DIR)/testdata/pacer_test.c $(CUDAHOOK_DIR)/src/pacer.c $(CUDAHOOK_DIR)/src/order.c \
		$(CUDAHOOK_DIR)/src/borrow.c $(CUDAHOOK_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -D_GNU_SOURCE -I$(CUDAHOOK_DIR)/src -I$(CUDAHOOK_DIR)/include -o $@ \
		$(CUDAHOOK_DIR)/testdata/pacer_test.c $(CUDAHOOK_DIR)/src/pacer.c $(CUDAHOOK_DIR)/src/order.c \
		$(CUDAHOOK_DIR)/src/borrow.c

C_TARGETS += $(CUDAHOOK_PACER_TEST)

# The spatial mode's decisions (testdata/spatial_test.c): spatial.c and the
# quota parser alone; TestSpatialDecisions runs it.
CUDAHOOK_SPATIAL_TEST := $(BUILD)/cudahook/spatial_test
$(CUDAHOOK_SPATIAL_TEST): $(CUDAHOOK_DIR)/testdata/spatial_test.c $(CUDAHOOK_DIR)/src/spatial.c $(CUDAHOOK_DIR)/src/quota.c $(CUDAHOOK_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -D_GNU_SOURCE -I$(CUDAHOOK_DIR)/src -I$(CUDAHOOK_DIR)/include -o $@ \
		$(CUDAHOOK_DIR)/testdata/spatial_test.c $(CUDAHOOK_DIR)/src/spatial.c $(CUDAHOOK_DIR)/src/quota.c

C_TARGETS += $(CUDAHOOK_SPATIAL_TEST)
