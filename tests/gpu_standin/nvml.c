/* A stand-in libnvidia-ml.so.1 (tests only): the driver's NVML, answering for made-up GPUs, so that
 * torch's own NVML count (torch/cuda/__init__.py: _raw_device_count_nvml, _raw_device_uuid_nvml) and
 * nvidia-ml-py (snakeddp.util.gpus) meet it where they meet the real one: CDLL("libnvidia-ml.so.1"),
 * found on LD_LIBRARY_PATH. tests/gpu_standin.py compiles it once (cached by this file's hash) for every
 * stand-in machine: each names its GPUs' file in SNAKEDDP_STANDIN_NVML, read at nvmlInit as the real library
 * asks its kernel driver then:
 *
 *   driver 570.86.15 12080           the driver's version and the CUDA version it supports (x 1000)
 *   gpu GPU-uuid 8 0 0 NVIDIA A100   UUID, compute capability major and minor, device minor, name
 *   mig MIG-uuid NVIDIA A100 MIG ... a MIG slice of the gpu line before it (which is then in MIG mode)
 *   denied 2                         this process's device cgroup denies GPU 2 (its handle: NO_PERMISSION)
 *   lost 1                           GPU 1 fell off the bus (its handle: GPU_IS_LOST)
 *   init 18                          nvmlInit answers this error (18: a driver/library version mismatch)
 *   slow 30                          nvmlInit answers after 30 s (a GPU fallen off the bus blocks it)
 *
 * Only what the callers ask is answered; the rest of NVML is absent (dlsym fails, as on an older driver).
 * A file that cannot be read (or none named) answers nvmlInit with NVML_ERROR_DRIVER_NOT_LOADED. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SUCCESS 0
#define ERROR_UNINITIALIZED 1
#define ERROR_INVALID_ARGUMENT 2
#define ERROR_NOT_SUPPORTED 3
#define ERROR_INSUFFICIENT_SIZE 7
#define ERROR_DRIVER_NOT_LOADED 9
#define ERROR_NOT_FOUND 6
#define MAX_GPUS 16
#define MAX_MIGS 7

struct device {
    char uuid[96], name[96];
    int major, minor, node, mig, slices, count;  /* mig: a slice; slices: MIG mode on; count: its slices */
    struct device *parent, *migs[MAX_MIGS];
};

static struct device gpus[MAX_GPUS], migs[MAX_GPUS * MAX_MIGS];
static int gpu_count, mig_count, loaded;
static char driver[80];
static int cuda_version;

/* The host's answers beside its GPUs: a device cgroup's denials, nvmlInit's error, a slow nvmlInit. */
#define ERROR_NO_PERMISSION 4
#define ERROR_GPU_IS_LOST 15
#define ERROR_LIB_RM_VERSION_MISMATCH 18
static int denied[MAX_GPUS], init_error, init_seconds;

static void host_reset(void) { memset(denied, 0, sizeof denied), init_error = init_seconds = 0; }

/* A handle's error for a GPU the process may not open (NO_PERMISSION) or that is lost (GPU_IS_LOST); else 0. */
static int host_handle_error(unsigned index) { return denied[index]; }

static int host_line(const char *line) {
    int index;
    if (sscanf(line, "denied %d", &index) == 1 && index >= 0 && index < MAX_GPUS)
        return denied[index] = ERROR_NO_PERMISSION;
    if (sscanf(line, "lost %d", &index) == 1 && index >= 0 && index < MAX_GPUS)
        return denied[index] = ERROR_GPU_IS_LOST;
    return sscanf(line, "init %d", &init_error) == 1 || sscanf(line, "slow %d", &init_seconds) == 1;
}

static int host_init(int result) {
    if (result == SUCCESS && init_seconds)
        sleep((unsigned)init_seconds);
    if (result == SUCCESS && init_error)
        loaded = 0, result = init_error;
    return result;
}

static int load(void) {
    const char *devices = getenv("SNAKEDDP_STANDIN_NVML");
    FILE *file = devices ? fopen(devices, "r") : NULL;
    char line[256];
    if (!file)
        return ERROR_DRIVER_NOT_LOADED;
    gpu_count = mig_count = 0;
    host_reset();
    while (fgets(line, sizeof line, file)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "driver ", 7)) {
            sscanf(line + 7, "%79s %d", driver, &cuda_version);
        } else if (!strncmp(line, "gpu ", 4) && gpu_count < MAX_GPUS) {
            struct device *gpu = &gpus[gpu_count++];
            int used = 0;
            memset(gpu, 0, sizeof *gpu);
            sscanf(line + 4, "%95s %d %d %d %n", gpu->uuid, &gpu->major, &gpu->minor, &gpu->node, &used);
            snprintf(gpu->name, sizeof gpu->name, "%s", line + 4 + used);
        } else if (!strncmp(line, "mig ", 4) && gpu_count && mig_count < MAX_GPUS * MAX_MIGS) {
            struct device *parent = &gpus[gpu_count - 1], *slice = &migs[mig_count++];
            int used = 0;
            memset(slice, 0, sizeof *slice);
            sscanf(line + 4, "%95s %n", slice->uuid, &used);
            snprintf(slice->name, sizeof slice->name, "%s", line + 4 + used);
            slice->major = parent->major, slice->minor = parent->minor, slice->node = parent->node;
            slice->mig = 1, slice->parent = parent;
            parent->slices = 1;  /* MIG mode on */
            if (parent->count < MAX_MIGS)
                parent->migs[parent->count++] = slice;
        } else {
            host_line(line);
        }
    }
    fclose(file);
    loaded = 1;
    return SUCCESS;
}

static int copy(char *out, unsigned length, const char *text) {
    if (!out)
        return ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > length)
        return ERROR_INSUFFICIENT_SIZE;
    strcpy(out, text);
    return SUCCESS;
}

static struct device *device_of(void *handle) { return (struct device *)handle; }

int nvmlInitWithFlags(unsigned flags) { (void)flags; return host_init(load()); }
int nvmlInit_v2(void) { return host_init(load()); }
int nvmlInit(void) { return host_init(load()); }
int nvmlShutdown(void) { return loaded ? SUCCESS : ERROR_UNINITIALIZED; }

const char *nvmlErrorString(int result) {
    switch (result) {
    case SUCCESS: return "Success";
    case ERROR_UNINITIALIZED: return "Uninitialized";
    case ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case ERROR_NOT_SUPPORTED: return "Not Supported";
    case ERROR_NOT_FOUND: return "Not Found";
    case ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case ERROR_GPU_IS_LOST: return "GPU is lost";
    case ERROR_LIB_RM_VERSION_MISMATCH: return "Driver/library version mismatch";
    default: return "Unknown Error";
    }
}

int nvmlSystemGetDriverVersion(char *version, unsigned length) {
    return loaded ? copy(version, length, driver) : ERROR_UNINITIALIZED;
}

int nvmlSystemGetCudaDriverVersion(int *version) {
    if (!loaded)
        return ERROR_UNINITIALIZED;
    *version = cuda_version;
    return SUCCESS;
}

int nvmlSystemGetCudaDriverVersion_v2(int *version) { return nvmlSystemGetCudaDriverVersion(version); }

int nvmlDeviceGetCount_v2(unsigned *count) {
    if (!loaded)
        return ERROR_UNINITIALIZED;
    *count = (unsigned)gpu_count;
    return SUCCESS;
}

int nvmlDeviceGetCount(unsigned *count) { return nvmlDeviceGetCount_v2(count); }

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **handle) {
    if (!loaded)
        return ERROR_UNINITIALIZED;
    if (index >= (unsigned)gpu_count)
        return ERROR_INVALID_ARGUMENT;
    if (host_handle_error(index))
        return host_handle_error(index);
    *handle = &gpus[index];
    return SUCCESS;
}

int nvmlDeviceGetHandleByIndex(unsigned index, void **handle) { return nvmlDeviceGetHandleByIndex_v2(index, handle); }

int nvmlDeviceGetName(void *handle, char *name, unsigned length) { return copy(name, length, device_of(handle)->name); }
int nvmlDeviceGetUUID(void *handle, char *uuid, unsigned length) { return copy(uuid, length, device_of(handle)->uuid); }

int nvmlDeviceGetCudaComputeCapability(void *handle, int *major, int *minor) {
    *major = device_of(handle)->major, *minor = device_of(handle)->minor;
    return SUCCESS;
}

int nvmlDeviceGetMinorNumber(void *handle, unsigned *node) {
    if (device_of(handle)->mig)
        return ERROR_NOT_SUPPORTED;
    *node = (unsigned)device_of(handle)->node;
    return SUCCESS;
}

int nvmlDeviceGetMigMode(void *handle, unsigned *current, unsigned *pending) {
    if (device_of(handle)->mig)
        return ERROR_NOT_SUPPORTED;
    *current = *pending = (unsigned)device_of(handle)->slices;
    return SUCCESS;
}

int nvmlDeviceGetMaxMigDeviceCount(void *handle, unsigned *count) {
    *count = device_of(handle)->slices ? MAX_MIGS : 0;
    return SUCCESS;
}

int nvmlDeviceGetMigDeviceHandleByIndex(void *handle, unsigned index, void **slice) {
    struct device *gpu = device_of(handle);
    if (!gpu->slices)
        return ERROR_INVALID_ARGUMENT;
    if (index >= (unsigned)gpu->count)
        return ERROR_NOT_FOUND;
    *slice = gpu->migs[index];
    return SUCCESS;
}

int nvmlDeviceGetDeviceHandleFromMigDeviceHandle(void *handle, void **parent) {
    if (!device_of(handle)->mig)
        return ERROR_INVALID_ARGUMENT;
    *parent = device_of(handle)->parent;
    return SUCCESS;
}

/* Other work on a shared machine's GPUs, as nvidia-smi shows it: lines of the same file, keyed by UUID and read
 * whenever asked (so that a test can free a GPU between two calls):
 *
 *   process GPU-uuid 4242 83751862272   a compute process on the GPU and the bytes it holds
 *   memory GPU-uuid 85899345920 1073741824   the GPU's total bytes and those in use besides its processes'
 *   mode GPU-uuid 3                      its compute mode (2: PROHIBITED, 3: EXCLUSIVE_PROCESS; else 0)
 *   utilization GPU-uuid 73 40           the share (%) of the last sample period a kernel ran, and the memory's
 *
 * A GPU without a memory line has 40 GiB, in use only by its processes. MIG slices run no process here. */
#define MAX_PROCESSES 16

struct process_info { unsigned pid; unsigned long long used; unsigned gpu_instance, compute_instance; };
struct memory_info { unsigned long long total, free, used; };

static int use_lines(const char *kind, const char *uuid, unsigned long long found[][2], int most) {
    const char *devices = getenv("SNAKEDDP_STANDIN_NVML");
    FILE *file = devices ? fopen(devices, "r") : NULL;
    char line[256], what[16], name[96];
    unsigned long long first, second;
    int count = 0;
    if (!file)
        return 0;
    while (fgets(line, sizeof line, file) && count < most) {
        int fields = sscanf(line, "%15s %95s %llu %llu", what, name, &first, &second);
        if (fields >= 3 && !strcmp(what, kind) && !strcmp(name, uuid))
            found[count][0] = first, found[count][1] = fields == 4 ? second : 0, count++;
    }
    fclose(file);
    return count;
}

int nvmlDeviceGetHandleByUUID(const char *uuid, void **handle) {
    if (!loaded)
        return ERROR_UNINITIALIZED;
    for (int index = 0; index < gpu_count; index++)
        if (!strcmp(gpus[index].uuid, uuid))
            return *handle = &gpus[index], SUCCESS;
    for (int index = 0; index < mig_count; index++)
        if (!strcmp(migs[index].uuid, uuid))
            return *handle = &migs[index], SUCCESS;
    return ERROR_NOT_FOUND;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void *handle, unsigned *count, struct process_info *infos) {
    unsigned long long found[MAX_PROCESSES][2];
    int running = device_of(handle)->mig ? 0 : use_lines("process", device_of(handle)->uuid, found, MAX_PROCESSES);
    if (!count)
        return ERROR_INVALID_ARGUMENT;
    if (*count < (unsigned)running || (running && !infos)) {
        *count = (unsigned)running;
        return running ? ERROR_INSUFFICIENT_SIZE : SUCCESS;
    }
    for (int index = 0; index < running; index++) {
        memset(&infos[index], 0, sizeof infos[index]);
        infos[index].pid = (unsigned)found[index][0], infos[index].used = found[index][1];
    }
    *count = (unsigned)running;
    return SUCCESS;
}

int nvmlDeviceGetComputeRunningProcesses_v2(void *handle, unsigned *count, struct process_info *infos) {
    return nvmlDeviceGetComputeRunningProcesses_v3(handle, count, infos);
}

int nvmlDeviceGetMemoryInfo(void *handle, struct memory_info *memory) {
    unsigned long long found[MAX_PROCESSES][2], sizes[1][2] = {{40ULL << 30, 0}};
    struct device *device = device_of(handle);
    int running = device->mig ? 0 : use_lines("process", device->uuid, found, MAX_PROCESSES);
    if (device->mig)
        sizes[0][0] = 5ULL << 30;  /* a 1g.5gb slice */
    else
        use_lines("memory", device->uuid, sizes, 1);
    memory->total = sizes[0][0], memory->used = sizes[0][1];
    for (int index = 0; index < running; index++)
        memory->used += found[index][1];
    memory->used = memory->used < memory->total ? memory->used : memory->total;
    memory->free = memory->total - memory->used;
    return SUCCESS;
}

int nvmlDeviceGetComputeMode(void *handle, int *mode) {
    unsigned long long found[1][2] = {{0, 0}};
    if (device_of(handle)->mig)
        return ERROR_NOT_SUPPORTED;
    use_lines("mode", device_of(handle)->uuid, found, 1);
    *mode = (int)found[0][0];
    return SUCCESS;
}

struct utilization { unsigned gpu, memory; };

int nvmlDeviceGetUtilizationRates(void *handle, struct utilization *rates) {
    unsigned long long found[1][2] = {{0, 0}};
    if (device_of(handle)->mig)
        return ERROR_NOT_SUPPORTED;  /* as the real one answers for a MIG slice */
    use_lines("utilization", device_of(handle)->uuid, found, 1);
    rates->gpu = (unsigned)found[0][0], rates->memory = (unsigned)found[0][1];
    return SUCCESS;
}
