/* kla_cuda.h - the CUDA backend of kiln-agent (kla_backend_cuda,
 * cuda_backend.c): devices, NVRTC builds, and one worker process per GPU
 * that owns the CUDA context.
 *
 * Devices. `--device` takes "cuda:0", "cuda:0,1", "cuda:all" (or "cuda"),
 * alone or with "cpu" ("cpu,cuda:0"); see kla_backend.h. The agent's
 * devices are numbered in Hello (and in MeasureRequest.device_index) CPU
 * first, then the GPUs in the order given. The driver (libcuda.so.1) and
 * NVRTC (kl_nvrtc.h) are loaded with dlopen.
 *
 * Builds. Each candidate is compiled by NVRTC for the device's exact arch
 * (sm_XY from the compute capability) into a cubin, in the agent's build
 * slots (host threads), cached as WORKDIR/HEX.cubin where HEX hashes
 * (source, arch, NVRTC version). A compile error is COMPILE_ERROR with
 * NVRTC's log.
 *
 * Runs. A GPU's runner thread talks to its worker process (kiln-agent
 * --gpu-worker ORDINAL, exec'd, so that no CUDA state crosses a fork) over
 * a socket pair (fd 3). The worker runs in a bubblewrap sandbox
 * (kla_jail.h, kla_jail_base): uid and gid 65534 (an agent started as root
 * becomes 65534 before it runs bwrap), new user, mount, pid, ipc, uts,
 * cgroup and network namespaces (nothing outside is reachable: TCP to
 * 127.0.0.1 reaches only the sandbox's own loopback), a read-only /usr and
 * system libraries, a private /proc and an empty /tmp, no /home, no
 * workdir, death with the agent's thread (--die-with-parent), and the
 * worker itself pid 1 (--as-pid-1: no dumpable bubblewrap reaper). Its
 * executable comes in by descriptor (bwrap --file, as /kiln-gpu-worker),
 * since uid 65534 may not reach the build tree. Its /dev is bwrap's
 * minimal one plus, bound where they exist, its own GPU's node and the
 * driver's shared ones (kla_cuda_dev_nodes: /dev/nvidiaM, M the driver's
 * minor for the GPU's PCI address, or the ordinal when the driver does
 * not say; /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools,
 * /dev/nvidia-modeset), so the driver shows it that GPU alone, under an
 * ordinal of its own: the worker finds it by PCI address
 * (KILN_GPU_PCI_BUS_ID, kla_cuda_ordinal_of). /sys/bus/pci and
 * /sys/devices are bound read-only for the driver (not for the stand-in);
 * so are the directories of KILN_LIBCUDA, KILN_NVRTC, LD_LIBRARY_PATH
 * and of the loaded libcuda / libnvrtc that lie outside the system the
 * sandbox sees (under /usr they are visible already: /usr/local/cuda,
 * /usr/lib/x86_64-linux-gnu). Its environment is cleared but for CUDA_*,
 * NVIDIA_*, LD_LIBRARY_PATH, KILN_LIBCUDA, KILN_NVRTC, KILN_LOG,
 * KILN_FAKE_GPU_WORKER and the sanitizers' *SAN_OPTIONS; not
 * CUDA_VISIBLE_DEVICES when the GPU's PCI address is known (the agent
 * applied it when it chose the GPU; its indices would name no GPU
 * inside). MIG instances (/dev/nvidia-caps) are not bound: a MIG
 * CUDA_VISIBLE_DEVICES needs --unsafe-no-sandbox. The worker makes itself
 * non-dumpable (PR_SET_DUMPABLE 0) with RLIMIT_CORE 0. It has no seccomp
 * filter: the driver's ioctls are many and version-bound, and no
 * candidate host code runs in the worker, only device code through the
 * driver. It never opens the workdir: each request brings the candidate's
 * and the reference's cubin as sealed memfd copies (kla_cuda_wire.h),
 * loaded with cuModuleLoadData from memory. With --unsafe-no-sandbox
 * (kla_jail_unsafe) the worker is exec'd as is; where bwrap cannot make a
 * sandbox otherwise, the worker does not start (RUNTIME_ERROR naming why).
 * The worker makes the deterministic inputs on the device
 * (f32, or for f16 / bf16 inputs the same values rounded to nearest even
 * into 16-bit buffers: kla_cuda_input_bits; outputs are f32),
 * runs the reference once per (workload, seed, shapes, reference build) and
 * keeps inputs and reference outputs on the device, then for each
 * candidate: loads the cubin, reads registers, static shared memory and
 * the thread limit from the loaded function and checks them and the launch
 * against the device's limits, fills the outputs with NaN, launches with
 * cuLaunchKernel (grid, block, dynamic shared bytes of the Candidate),
 * compares on the device (|out - ref| > atol + rtol (|ref| + rms), rms
 * the root mean square of the reference output, or NaN, is WRONG_RESULT,
 * as on the CPU), then times with CUDA events: `number` launches per sample
 * (grown until a sample lasts min_repeat_ms), `repeat` samples, the L2
 * flushed before each by a memset of twice its size, and compares the
 * last timed launch's output once more, as the CPU runner does (a
 * mismatch is WRONG_RESULT, no samples, "check after timing: ...").
 *
 * Faults. An error that poisons the context (illegal address, trap,
 * misaligned access, ...) is RUNTIME_ERROR naming the CUDA error; the
 * worker then exits and the runner starts a new one for the next
 * candidate. A candidate still running after timeout_ms gets its worker
 * killed (TIMEOUT). The agent lives on in both cases.
 *
 * The reference kernel of a CUDA request is CUDA C too (a naive kernel of
 * the same ABI), launched with block (256,1,1) and grid (ceil(n / 256),
 * 1, 1), n the element count of the first output: thread
 * blockIdx.x * 256 + threadIdx.x computes output element that index, and
 * returns when it is >= n.
 *
 * Test stand-in. With KILN_FAKE_GPU_WORKER=1 in the environment the agent
 * reports a fake device ("fake GPU", cuda/sm_90, simulated) and the worker
 * touches no driver: it answers by the candidate's entry name (containing
 * "oob": a poisoned context, RUNTIME_ERROR and exit; "crash": exits
 * without an answer; "hang": never answers; "wrong": WRONG_RESULT;
 * starting with "probe", as "probe[:PORT[:DIR]]": OK, its error text the
 * facts of its sandbox as words "uid= gid= pid= dumpable= core= workdir=
 * (DIR opened, or no(errno)) tcp= (connect to 127.0.0.1:PORT) devs= (the
 * non-standard /dev entries) fds= (its open descriptors) bus="; else OK with
 * synthetic samples). Its sandbox is the real worker's. Every result of a fake
 * device is marked simulated, so it never counts as a GPU measurement.
 */
#ifndef KLA_CUDA_H
#define KLA_CUDA_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kl_nvrtc.h"
#include "kla_backend.h"
#include "kla_measure.h"

#define KLA_MAX_GPUS 16
#define KLA_CUDA_REF_BLOCK 256

/* ---- devices ------------------------------------------------------------ */

typedef struct {
    int ordinal;
    char name[128];
    char arch[16];   /* "sm_90" */
    char target[32]; /* "cuda/sm_90" */
    int cc_major, cc_minor;
    uint32_t sms;
    uint64_t memory_bytes;
    uint32_t clock_mhz, mem_clock_mhz;
    uint64_t l2_bytes;
    uint32_t max_threads_per_block;
    uint32_t max_shared_per_block; /* without opt-in (48 KiB) */
    uint32_t max_shared_optin;     /* with opt-in */
    uint32_t max_regs_per_block;
    char driver_version[32]; /* "13.0" */
    char pci_bus_id[16];     /* "0000:3b:00.0"; "": unknown (fake) */
    bool fake;               /* KILN_FAKE_GPU_WORKER stand-in */
} kla_cuda_dev_t;

/* Whether KILN_FAKE_GPU_WORKER asks for the test stand-in. */
bool kla_cuda_fake(void);

/* Describes the GPUs of sel (CUDA ordinals; every GPU for all, at most
 * KLA_MAX_GPUS) into out (room for KLA_MAX_GPUS) and their count into *n. No
 * driver, or cuInit failing, is KL_ERR_UNSUPPORTED; an ordinal the machine does
 * not have is KL_ERR_NOTFOUND; both with a message (kiln-agent exits 69). */
int kla_cuda_query(const kla_devsel_t *sel, kla_cuda_dev_t *out, int *n,
                   char *err);

/* The CUDA ordinal, in this process's view of the driver, of the GPU at
 * PCI address pci_bus_id (kla_cuda_dev_t.pci_bus_id): how a sandboxed
 * worker, which sees only its own GPU, finds it. KL_OK; KL_ERR_NOTFOUND or
 * KL_ERR_UNSUPPORTED with a message. */
int kla_cuda_ordinal_of(const char *pci_bus_id, int *ordinal, char *err);

/* The device nodes a sandboxed worker of GPU d gets (see "Runs"), those of
 * them that exist under root ("" or NULL: the machine's own /dev and
 * /proc; tests pass a directory), as absolute paths without root into out
 * (room for max); returns their count. The GPU's own node is /dev/nvidiaM,
 * M the "Device Minor" of /proc/driver/nvidia/gpus/BUS/information for its
 * PCI address; without that file (or an address) M is the CUDA ordinal, a
 * guess: ordinals follow CUDA_DEVICE_ORDER and CUDA_VISIBLE_DEVICES,
 * minors the driver's probe order, and they can differ. Then the shared
 * nodes: /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools,
 * /dev/nvidia-modeset. */
int kla_cuda_dev_nodes(const kla_cuda_dev_t *d, const char *root,
                       char (*out)[64], int max);

/* ---- launches and resources -------------------------------------------- */

/* A kernel's launch: grid, block, dynamic shared bytes (kla_backend.h). */
typedef kla_launch_t kla_cuda_launch_t;

/* What a kernel needs (from the loaded function, or from ptxas). */
typedef struct {
    int regs;         /* per thread */
    long smem_static; /* bytes */
    long local_bytes; /* per thread */
    int max_threads;  /* the function's limit (launch bounds); 0: none */
} kla_cuda_res_t;

/* Checks a launch of a kernel needing res against device d: every grid and
 * block dimension >= 1 and within CUDA's limits, threads per block within
 * the device's and the function's limits, registers per block (per
 * thread, rounded up to the allocation unit of 8, times threads rounded
 * up to a warp) within the device's, static + dynamic shared memory within
 * the opt-in limit. KL_ERR_INVAL with a message naming the resource. */
int kla_cuda_check_launch(const kla_cuda_dev_t *d, const kla_cuda_res_t *res,
                          const kla_cuda_launch_t *l, char *err);

/* The launch of a reference kernel for n output elements. */
void kla_cuda_ref_launch(uint64_t n, kla_cuda_launch_t *out);

/* The value of element i of input argument arg for seed: uniform in
 * [-1, 1), a multiple of 2^-23, the same bits as the device's generator
 * (a splitmix64 of seed, arg and i). */
float kla_cuda_input_value(uint64_t seed, uint32_t arg, uint64_t i);

/* Bytes per element of an argument of dtype dt on the GPU: 2 for f16 and
 * bf16 (inputs only), 4 for f32. */
size_t kla_cuda_dtype_size(Kiln__DType dt);

/* v as the 16 bits of an f16 (bf16 when bf16), rounded to nearest even:
 * f16 keeps subnormals and overflows to infinity (from 65520 up), bf16
 * overflows to infinity past its largest finite value; infinities stay
 * infinities, a NaN becomes a quiet NaN of the same sign. The same bits
 * as kl_dtype_bits (coordinator/ir) and as the device's kla_round16. */
uint16_t kla_cuda_half_bits(bool bf16, float v);

/* Element i of a 16-bit input argument arg of dtype dt (f16 or bf16):
 * kla_cuda_input_value rounded to dt, as its bits (what the device's
 * kla_fill16 writes). */
uint16_t kla_cuda_input_bits(Kiln__DType dt, uint64_t seed, uint32_t arg,
                             uint64_t i);

/* ---- builds -------------------------------------------------------------- */

typedef struct kla_cuda_builder_s kla_cuda_builder_t;

/* Loads NVRTC (kl_nvrtc_default) and keeps workdir (borrowed, must
 * exist). KL_ERR_UNSUPPORTED with NVRTC's message when it cannot load. */
int kla_cuda_builder_new(kla_cuda_builder_t **out, const char *workdir,
                         char *err);
void kla_cuda_builder_destroy(kla_cuda_builder_t **self_p);

/* Compiles source (len bytes) for arch ("sm_90") into a cubin, or finds it
 * in the cache. Fills out like kla_builder_build (so_path is the cubin)
 * and, when res is not NULL and the compiler ran, the resources ptxas
 * reported for entry (zeroed otherwise). KL_OK, KL_ERR_COMPILE (out->log
 * holds NVRTC's log), KL_ERR_IO. Thread-safe. */
int kla_cuda_builder_build(kla_cuda_builder_t *self, const char *source,
                           size_t len, const char *arch, const char *entry,
                           kla_build_t *out, kla_cuda_res_t *res);

/* Times NVRTC actually ran. */
unsigned kla_cuda_builder_compiles(kla_cuda_builder_t *self);

/* ---- runner (agent side) ------------------------------------------------- */

typedef struct kla_cuda_runner_s kla_cuda_runner_t;

typedef struct {
    const kla_cuda_dev_t *dev; /* copied */
    /* The executable run as `PATH --gpu-worker ORDINAL`; NULL: this
     * process's own executable (/proc/self/exe). */
    const char *worker_path;
    /* Seconds a worker may take to start (context, helper kernels) and
     * to compute a reference; 0: 120. */
    double setup_s;
} kla_cuda_runner_config_t;

int kla_cuda_runner_new(kla_cuda_runner_t **out,
                        const kla_cuda_runner_config_t *cfg, char *err);
/* Stops the worker (SIGKILL) and frees. NULLs *self_p. */
void kla_cuda_runner_destroy(kla_cuda_runner_t **self_p);

/* Measures the candidate (cubin, entry, launch) of problem p against the
 * reference (ref_cubin, ref_entry). Never fails as a call: every failure
 * is a status in *out. Starts the worker when none runs. */
void kla_cuda_runner_measure(kla_cuda_runner_t *self, const kla_problem_t *p,
                             const char *ref_cubin, const char *ref_entry,
                             const char *cubin, const char *entry,
                             const kla_cuda_launch_t *l, kla_result_t *out);

/* Kills the worker, if any (any thread; shutdown). */
void kla_cuda_runner_abort(kla_cuda_runner_t *self);
/* Workers started so far (the first and every restart). */
unsigned kla_cuda_runner_starts(kla_cuda_runner_t *self);
/* The worker's process id, 0 when none runs (tests). */
pid_t kla_cuda_runner_pid(kla_cuda_runner_t *self);

/* ---- worker (its own process) -------------------------------------------- */

/* The CUDA C of the worker's helper kernels (inputs, comparison). */
const char *kla_cuda_helpers_source(void);

/* The worker's body: serves requests on fd until it closes. Returns the
 * process exit status (0 on a clean end, 3 after a poisoned context). */
int kla_cuda_worker_main(int ordinal, int fd);

#endif
