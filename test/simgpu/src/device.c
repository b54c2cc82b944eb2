/* Device enumeration and properties. Ordinals are visible devices in config
 * order, filtered by CUDA_VISIBLE_DEVICES like the real driver. */
#define _GNU_SOURCE
#include "cuda_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* CUDA_VISIBLE_DEVICES: comma list of ordinals or UUID prefixes ("GPU-5e3b");
 * the list stops at the first entry that does not match, as in the driver. */
void sim_apply_cvd(struct sim_env *env)
{
    const char *e = getenv("CUDA_VISIBLE_DEVICES");
    if (!e) return;
    int out[SIM_MAX_DEV], n = 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", e);
    char *save, *tok;
    for (tok = strtok_r(buf, ",", &save); tok && n < SIM_MAX_DEV; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') tok++;
        int pick = -1;
        if (strncasecmp(tok, "GPU-", 4) == 0) {
            for (int i = 0; i < env->nvis; i++)
                if (strncasecmp(env->cfg.dev[env->vis[i]].uuid, tok, strlen(tok)) == 0) {
                    if (pick >= 0) {
                        pick = -2;
                        break;
                    } /* ambiguous prefix */
                    pick = i;
                }
        } else {
            char *end;
            long v = strtol(tok, &end, 10);
            if (end != tok && *end == 0 && v >= 0 && v < env->nvis) pick = (int)v;
        }
        if (pick < 0) break;
        for (int j = 0; j < n; j++)
            if (out[j] == env->vis[pick]) pick = -1;
        if (pick < 0) break;
        out[n++] = env->vis[pick];
    }
    memcpy(env->vis, out, sizeof(int) * (size_t)n);
    env->nvis = n;
}

SIM_EXPORT CUresult cuDeviceGetCount(int *count)
{
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    *count = g.env.nvis;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(ordinal)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    *device = ordinal;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    snprintf(name, (size_t)len, "%s", devcfg(dev)->name); /* truncates like the driver */
    LEAVE(CUDA_SUCCESS);
}

static CUresult get_uuid(CUuuid *uuid, CUdevice dev)
{
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    memcpy(uuid->bytes, devcfg(dev)->uuid_bytes, 16);
    LEAVE(CUDA_SUCCESS);
}
SIM_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return get_uuid(uuid, dev); }
SIM_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return get_uuid(uuid, dev); }

SIM_EXPORT CUresult cuDeviceGetLuid(char *luid, unsigned int *mask, CUdevice dev)
{
    if (!luid || !mask) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    LEAVE(CUDA_ERROR_NOT_SUPPORTED); /* LUIDs are a Windows thing */
}

SIM_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    *bytes = sim_usable(devcfg(dev));
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    size_t b;
    CUresult r = cuDeviceTotalMem_v2(bytes ? &b : NULL, dev);
    if (r == CUDA_SUCCESS) *bytes = b > 0xffffffffULL ? 0xffffffffU : (unsigned)b;
    return r;
}

SIM_EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    *major = 9;
    *minor = 0;
    LEAVE(CUDA_SUCCESS);
}

#define ATTR_LIMIT 150 /* one past the highest attribute the CUDA 13 driver knows */

static int attr_value(const struct sim_devcfg *d, int a)
{
    switch (a) {
    case 1: return 1024;
    case 2: return 1024;
    case 3: return 1024;
    case 4: return 64;
    case 5: return 2147483647;
    case 6: return 65535;
    case 7: return 65535;
    case 8: return 49152;
    case 9: return 65536;
    case 10: return 32;
    case 11: return 2147483647;
    case 12: return 65536;
    case 13: return 1980000;
    case 14: return 512;
    case 15: return 1;
    case 16: return d->sms;
    case 17: return 0;
    case 18: return 0;
    case 19: return 1;
    case 20: return 0;
    case 21: return 131072;
    case 22: return 131072;
    case 23: return 65536;
    case 24:
    case 25:
    case 26: return 16384;
    case 27: return 32768;
    case 28: return 32768;
    case 29: return 2048;
    case 30: return 512;
    case 31: return 1;
    case 32: return 1;
    case 33: return (int)d->pci_bus;
    case 34: return (int)d->pci_dev;
    case 35: return 0;
    case 36: return 2619000;
    case 37: return 5120;
    case 38: return 52428800;
    case 39: return 2048;
    case 40: return 3;
    case 41: return 1;
    case 42: return 32768;
    case 43: return 2048;
    case 45:
    case 46: return 32768;
    case 47: return 16384;
    case 48: return 32768;
    case 49: return 2048;
    case 50: return (int)d->pci_domain;
    case 51: return 32;
    case 52:
    case 53: return 32768;
    case 54:
    case 55: return 2048;
    case 56:
    case 57: return 131072;
    case 58: return 65536;
    case 59: return 2048;
    case 60: return 131072;
    case 61: return 2048;
    case 62:
    case 63: return 65536;
    case 64: return 32768;
    case 65: return 2048;
    case 66: return 32768;
    case 67: return 2048;
    case 68: return 268435456;
    case 69:
    case 70: return 131072;
    case 71: return 65000;
    case 72:
    case 73: return 32768;
    case 74: return 16384;
    case 75: return 9;
    case 76: return 0;
    case 77: return 32768;
    case 78: return 1;
    case 79: return 1;
    case 80: return 1;
    case 81: return 233472;
    case 82: return 65536;
    case 83: return 1;
    case 84: return 0;
    case 85: return 0;
    case 86: return 0;
    case 87: return 2;
    case 88: return 0;
    case 89: return 1;
    case 90: return 1;
    case 91: return 1;
    case 92:
    case 93:
    case 94: return 0;
    case 95: return 1;
    case 96: return 1;
    case 97: return 232448;
    case 98: return 0;
    case 99: return 1;
    case 100: return 0;
    case 101: return 0;
    case 102: return 1;
    case 103: return 1;
    case 104:
    case 105: return 0;
    case 106: return 32;
    case 107: return 1;
    case 108: return 82837504;
    case 109: return 134213632;
    case 110: return 1;
    case 111: return 1024;
    case 112: return 1;
    case 113: return 1;
    case 114: return 1;
    case 115: return 1;
    case 116: return 1;
    case 117: return 1;
    case 118: return 0;
    case 119: return 1;
    case 120: return 1;
    case 121: return 1;
    case 122: return 1;
    case 123: return 1;
    case 124: return 1;
    case 125: return 1;
    case 126: return 4;
    case 127: return 1;
    case 128: return 0;
    case 129: return 1;
    case 130: return 0;
    case 131: return -1;
    case 132: return 0;
    case 133: return 0;
    case 134: return -1;
    default: return 0;
    }
}

SIM_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    if ((int)attrib < 1 || (int)attrib >= ATTR_LIMIT) LEAVE(CUDA_ERROR_INVALID_VALUE);
    *pi = attr_value(devcfg(dev), (int)attrib);
    if (attrib == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) *pi = sim_mps_sms(*pi); /* an MPS client sees its share */
    if (attrib == CU_DEVICE_ATTRIBUTE_MPS_ENABLED) *pi = g.mps;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    if (!pciBusId || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    struct sim_devcfg *d = devcfg(dev);
    snprintf(pciBusId, (size_t)len, "%04x:%02x:%02x.0", d->pci_domain, d->pci_bus, d->pci_dev);
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    if (!dev || !pciBusId) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    unsigned dom, bus, dv;
    if (sim_parse_pci(pciBusId, &dom, &bus, &dv)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    for (int i = 0; i < g.env.nvis; i++) {
        struct sim_devcfg *d = devcfg(i);
        if (d->pci_domain == dom && d->pci_bus == bus && d->pci_dev == dv) {
            *dev = i;
            LEAVE(CUDA_SUCCESS);
        }
    }
    LEAVE(CUDA_ERROR_INVALID_DEVICE);
}

SIM_EXPORT CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    if (!canAccessPeer) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev) || !dev_ok(peerDev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    *canAccessPeer = 0; /* no NVLink/P2P in the simulator */
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDeviceGetP2PAttribute(int *value, int attrib, CUdevice src, CUdevice dst)
{
    if (!value || attrib < 1 || attrib > 5) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(src) || !dev_ok(dst) || src == dst) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    *value = 0;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t *maxWidth, CUarray_format fmt, unsigned numChannels, CUdevice dev)
{
    (void)fmt;
    if (!maxWidth || (numChannels != 1 && numChannels != 2 && numChannels != 4)) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    *maxWidth = 268435456;
    LEAVE(CUDA_SUCCESS);
}
