#!/usr/bin/env python3
"""peers.py - one ONNX model end to end in ONNX Runtime, OpenVINO and
kiln's exported library, timed side by side, each runtime in a process
of its own (--same-process: all in this one).

Run it through tools/bench/peers.sh, which makes the virtual environment
(numpy, onnx, onnxruntime, openvino) and sets OpenMP's threads for kiln's
library before Python starts (libgomp reads its environment once).

  peers.py FILE.onnx [--lib DIR/libkiln_model.so]
           [--lib-bf16 DIR/libkiln_model.so] [--threads 2] [--runs 50]
           [--warmup 10] [--input x.npy] [--seed 0] [--rtol 1e-4]
           [--bf16-rtol 2e-2] [--top1-share 0.99] [--accuracy N]
           [--no-ov-default] [--settle 1] [--gap 0.3] [--json OUT.json]
           [--same-process]

Each runtime is configured as its users would: ONNX Runtime with the CPU
execution provider, ORT_ENABLE_ALL graph optimizations, intra-op threads =
--threads, one inter-op thread, sequential execution; OpenVINO's CPU plugin
with the LATENCY hint, INFERENCE_NUM_THREADS = --threads and f32 precision
(row "openvino"), and again at its own defaults, the LATENCY hint and
nothing else (row "openvino-default": it picks its inference precision,
bf16 on a CPU with AVX512-BF16 or AMX, and its threads; both are printed;
--no-ov-default leaves it out); kiln's library through ctypes on its
embedded weights (kiln_model_infer), and a second one exported with
`--precision bf16` with --lib-bf16 (row "kiln-bf16").
All get the same input (seeded ~N(0, 1), or --input). After --warmup runs
of each, --runs rounds: each round runs every runtime in turn, in an order
that rotates from round to round, each --settle times (default 1) untimed
and then --block times (default 5) timed, back to back; the round's
figure for a runtime is the median of its block (a single timed run per
round let the other runtimes' lingering threads into every figure:
MobileNetV2 in kiln 24 ms that way, 12 ms alone).
Each runtime lives in a process of its own, driven over a pipe, so that
its threads, their CPU affinity (libgomp binds the calling thread when
OMP_PROC_BIND is set, which in one process would pin the other runtimes'
calling thread too) and its allocator are its own; seen on 2 cores in one
process: OpenVINO's ResNet-18 median 32 ms beside kiln, 17-22 ms alone.
The untimed run absorbs what the runtime before left behind: libgomp's
threads (kiln), ONNX Runtime's and TBB's (OpenVINO) spin for a while after
a run, and on a machine with as many cores as threads the next runtime
pays for that spinning (seen on 2 cores: OpenVINO's median on the small
CNN went from 0.15 ms to 2.4 ms right after kiln's runs). Untimed runs
alone do not absorb all of it: ONNX Runtime's spinning workers slowed the
runtime after it (kiln's ResNet-18 INT8 from 5.4 to 9.5-14 ms) through 5
untimed and the first timed runs, some 80 ms. So before each runtime's
turn the driver also sleeps --gap seconds (default 0.3), idle, so that
the previous runtime's threads go to sleep first. The timed run is then a
warm back-to-back run, as a deployment calls a model in a loop.
Printed per runtime: median, p10..p90 and min..max of the timed runs, and
the ratio of medians to OpenVINO's and to ONNX Runtime's; then each ratio
taken round by round (median and p10..p90), which is steadier on a shared
machine. Every output must agree with ONNX Runtime's (f32), on the input and on
--accuracy N more seeded inputs: the largest |difference| over ONNX
Runtime's largest |output| within --rtol (1e-4) for a runtime computing in
f32, within --bf16-rtol (2e-2: some five bf16 rounding steps of 2^-8
through the network) for one computing in bf16 (openvino-default where it
chose bf16, kiln-bf16), and the same top-1 (argmax) as ONNX Runtime's on
every input (f32) or on at least --top1-share (0.99) of them (bf16); the
difference and the top-1 count are printed. Exit 1 when one does not
agree, 2 on a usage or load error.

A quantized model (its output the DequantizeLinear of a quantized tensor,
as quantize_static writes it) is compared in quantization steps (that
DequantizeLinear's scale) instead: per runtime, over the input and
--accuracy N more seeded inputs (seeds --seed + 1 .. + N), the largest
difference in steps, the share of elements within one step and how many
inputs have ONNX Runtime's top-1 (argmax); it agrees when every top-1 is
the same and at least --qshare (default 0.99) of the elements are within
one step. --keep-going times the runtimes even when one disagrees (the
check line still says DISAGREE).
"""

import argparse
import ctypes
import datetime
import hashlib
import json
import os
import platform
import sys
import time

import numpy as np


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def sha256_prefix(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()[:12]


def output_qstep(path):
    """The scale of the DequantizeLinear (a constant scalar) that computes
    the model's output, else None."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(path, load_external_data=False)
    inits = {i.name: i for i in m.graph.initializer}
    out = m.graph.output[0].name
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear" and out in n.output:
            if len(n.input) > 1 and n.input[1] in inits:
                v = numpy_helper.to_array(inits[n.input[1]])
                if v.size == 1:
                    return float(v.reshape(-1)[0])
    return None


def model_input(path):
    """Name and shape of the model's one graph input (symbolic dims: 1)."""
    import onnx
    m = onnx.load(path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    ins = [i for i in m.graph.input if i.name not in inits]
    if len(ins) != 1:
        sys.exit("peers.py: %s has %d inputs; one is supported"
                 % (path, len(ins)))
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1
            for d in ins[0].type.tensor_type.shape.dim]
    if ins[0].type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
        sys.exit("peers.py: input %r is not float32" % ins[0].name)
    return ins[0].name, dims


class Ort:
    name = "onnxruntime"

    def __init__(self, path, input_name, threads):
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.sess = ort.InferenceSession(path, so,
                                         providers=["CPUExecutionProvider"])
        self.input_name = input_name
        self.version = ort.__version__
        self.config = ("CPUExecutionProvider, ORT_ENABLE_ALL, intra_op %d, "
                       "inter_op 1, sequential" % threads)

    def run(self, x):
        return self.sess.run(None, {self.input_name: x})[0]


class OpenVino:
    """OpenVINO's CPU plugin. defaults=False: the LATENCY hint,
    INFERENCE_NUM_THREADS = threads and f32 precision ("openvino");
    defaults=True: the LATENCY hint and nothing else ("openvino-default"),
    so that it picks its inference precision (bf16 on a CPU with
    AVX512-BF16 or AMX) and its threads itself; the precision it chose is
    printed and decides the tolerance its output is checked with."""

    def __init__(self, path, threads, defaults=False):
        import openvino as ov
        core = ov.Core()
        cfg = {"PERFORMANCE_HINT": "LATENCY"}
        if not defaults:
            cfg.update({"INFERENCE_NUM_THREADS": threads,
                        "INFERENCE_PRECISION_HINT": "f32"})
        self.name = "openvino-default" if defaults else "openvino"
        self.compiled = core.compile_model(core.read_model(path), "CPU", cfg)
        self.req = self.compiled.create_infer_request()
        self.version = ov.__version__
        got = []
        self.precision = "f32"
        for k in ("INFERENCE_NUM_THREADS", "NUM_STREAMS",
                  "INFERENCE_PRECISION_HINT"):
            try:
                v = self.compiled.get_property(k)
            except Exception:  # a property this version does not report
                continue
            if k == "INFERENCE_PRECISION_HINT":
                v = ov_precision(v)
                self.precision = v
            got.append("%s %s" % (k, v))
        self.config = ("CPU, LATENCY hint%s, " % (
            " only (its defaults)" if defaults else "")) + ", ".join(got)

    def run(self, x):
        self.req.infer({0: x})
        return self.req.get_output_tensor(0).data


def ov_precision(v):
    """OpenVINO's element type as f32 / bf16 / f16 ("<Type: 'bfloat16'>"
    prints its long name)."""
    t = str(getattr(v, "get_type_name", lambda: v)()).lower()
    for long, short in (("bfloat16", "bf16"), ("float16", "f16"),
                        ("float32", "f32")):
        if long in t or t == short:
            return short
    return t


class Kiln:
    """kiln's exported library; name "kiln", or "kiln-bf16" for a library
    exported with --precision bf16 (--lib-bf16), checked with the bf16
    tolerance."""

    def __init__(self, lib, x, name="kiln"):
        self.name = name
        self.precision = "bf16" if name == "kiln-bf16" else "f32"
        self.lib = ctypes.CDLL(os.path.abspath(lib))
        L = self.lib
        L.kiln_model_infer.restype = ctypes.c_int
        L.kiln_model_infer.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        L.kiln_model_output_numel.restype = ctypes.c_longlong
        L.kiln_model_output_numel.argtypes = []
        L.kiln_model_param_numel.restype = ctypes.c_longlong
        L.kiln_model_param_numel.argtypes = [ctypes.c_int]
        n_in = L.kiln_model_param_numel(0)
        if n_in != x.size:
            raise RuntimeError("the library's input (parameter 0) has %d "
                               "elements, the model's %d" % (n_in, x.size))
        self.trained = None
        if hasattr(L, "kiln_model_trained"):
            L.kiln_model_trained.restype = ctypes.c_int
            self.trained = L.kiln_model_trained()
        self.out = np.empty(L.kiln_model_output_numel(), dtype=np.float32)
        self.x = None
        self.version = "libkiln_model.so %s" % sha256_prefix(lib)
        self.config = "OMP_NUM_THREADS %s, OMP_PROC_BIND %s" % (
            os.environ.get("OMP_NUM_THREADS", "(unset)"),
            os.environ.get("OMP_PROC_BIND", "(unset)"))

    def run(self, x):
        if self.x is not x:  # the buffer stays alive as self.x
            self.x = np.ascontiguousarray(x, dtype=np.float32)
        rc = self.lib.kiln_model_infer(self.x.ctypes.data,
                                       self.out.ctypes.data)
        if rc != 0:
            raise RuntimeError("kiln_model_infer returned %d" % rc)
        return self.out


def stats(ms):
    a = np.asarray(ms)
    return {"median": float(np.median(a)), "min": float(a.min()),
            "max": float(a.max()), "p10": float(np.percentile(a, 10)),
            "p90": float(np.percentile(a, 90)), "n": int(a.size)}


def _make(kind, a, input_name, x):
    if kind == "onnxruntime":
        return Ort(a["model"], input_name, a["threads"])
    if kind in ("openvino", "openvino-default"):
        return OpenVino(a["model"], a["threads"], kind == "openvino-default")
    if kind == "kiln-bf16":
        return Kiln(a["lib_bf16"], x, "kiln-bf16")
    return Kiln(a["lib"], x)


def _serve(conn, kind, a, input_name, x):
    """A runtime in a process of its own: answers "out" with its output
    and ("time", settle) with the milliseconds of one timed run after
    `settle` untimed ones."""
    try:
        rt = _make(kind, a, input_name, x)
    except Exception as e:  # reported by the parent, which exits 2
        conn.send(("error", "%s: %s" % (kind, e)))
        return
    conn.send(("ready", rt.name, rt.version, rt.config,
               getattr(rt, "trained", None), getattr(rt, "precision", "f32")))
    while True:
        msg = conn.recv()
        if msg[0] == "quit":
            return
        if msg[0] == "out":
            xx = msg[1] if len(msg) > 1 and msg[1] is not None else x
            conn.send(np.array(rt.run(xx), dtype=np.float32))
        else:
            for _ in range(msg[1]):
                rt.run(x)
            ms = []
            for _ in range(msg[2]):
                t0 = time.perf_counter()
                rt.run(x)
                ms.append((time.perf_counter() - t0) * 1e3)
            conn.send(ms)


class Isolated:
    """A runtime in its own process (the default): its thread pool, its
    threads' CPU affinity (libgomp binds the calling thread under
    OMP_PROC_BIND) and its allocator are its own, so one runtime's
    settings never move another's threads."""

    def __init__(self, kind, a, input_name, x):
        import multiprocessing as mp
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve,
                                args=(child, kind, a, input_name, x),
                                daemon=True)
        self.proc.start()
        msg = self.conn.recv()
        if msg[0] == "error":
            self.proc.join()
            raise RuntimeError(msg[1])
        (_, self.name, self.version, self.config, self.trained,
         self.precision) = msg
        self.config += "; own process"

    def output(self, x=None):
        self.conn.send(("out", x))
        return self.conn.recv()

    def timed(self, settle, block=1):
        self.conn.send(("time", settle, block))
        return self.conn.recv()

    def close(self):
        self.conn.send(("quit",))
        self.proc.join()


class Shared:
    """A runtime in this process (--same-process)."""

    def __init__(self, kind, a, input_name, x):
        self.rt = _make(kind, a, input_name, x)
        self.x = x
        self.name, self.version = self.rt.name, self.rt.version
        self.config = self.rt.config + "; same process"
        self.trained = getattr(self.rt, "trained", None)
        self.precision = getattr(self.rt, "precision", "f32")

    def output(self, x=None):
        return np.array(self.rt.run(self.x if x is None else x),
                        dtype=np.float32)

    def timed(self, settle, block=1):
        for _ in range(settle):
            self.rt.run(self.x)
        ms = []
        for _ in range(block):
            t0 = time.perf_counter()
            self.rt.run(self.x)
            ms.append((time.perf_counter() - t0) * 1e3)
        return ms

    def close(self):
        pass


def main():
    ap = argparse.ArgumentParser(
        description="ONNX Runtime, OpenVINO and kiln's library on one "
                    "model, side by side (see the docstring).")
    ap.add_argument("model")
    ap.add_argument("--lib", help="kiln's exported libkiln_model.so")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--input", help="a .npy input (else seeded ~N(0, 1))")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lib-bf16",
                    help="kiln's libkiln_model.so exported with --precision "
                         "bf16 (row kiln-bf16, checked with --bf16-rtol)")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--bf16-rtol", type=float, default=2e-2,
                    help="tolerance of a runtime computing in bf16: largest "
                         "|diff| from ONNX Runtime's f32 over its largest "
                         "|output|")
    ap.add_argument("--top1-share", type=float, default=0.99,
                    help="a runtime computing in bf16: least share of the "
                         "inputs whose top-1 is ONNX Runtime's")
    ap.add_argument("--no-ov-default", action="store_true",
                    help="leave out the openvino-default row (OpenVINO at "
                         "its own defaults, LATENCY hint only)")
    ap.add_argument("--settle", type=int, default=1,
                    help="untimed runs before each timed run of a round "
                         "(see the docstring)")
    ap.add_argument("--gap", type=float, default=0.3,
                    help="seconds to sleep, idle, before each runtime's "
                         "turn in a round (see the docstring)")
    ap.add_argument("--block", type=int, default=5,
                    help="timed runs of a runtime in each round, back to "
                         "back (the round's figure for it is their median)")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--accuracy", type=int, default=0,
                    help="a quantized model: N more seeded inputs compared "
                         "with ONNX Runtime's outputs")
    ap.add_argument("--qshare", type=float, default=0.99,
                    help="a quantized model: least share of elements within "
                         "one quantization step of ONNX Runtime's")
    ap.add_argument("--keep-going", action="store_true",
                    help="time the runtimes even when an output disagrees")
    ap.add_argument("--same-process", action="store_true",
                    help="run every runtime in this process (default: "
                         "each in a process of its own)")
    a = ap.parse_args()
    if (a.runs < 1 or a.warmup < 0 or a.threads < 1 or a.settle < 0
            or a.block < 1 or a.gap < 0):
        ap.error("--runs, --threads and --block must be >= 1, --warmup, "
                 "--settle and --gap >= 0")

    import onnx
    import onnxruntime
    import openvino

    input_name, shape = model_input(a.model)
    if a.input:
        x = np.load(a.input)
        if list(x.shape) != shape:
            sys.exit("peers.py: %s has shape %s, the model's input %s"
                     % (a.input, list(x.shape), shape))
    else:
        x = np.random.default_rng(a.seed).standard_normal(shape)
    x = np.ascontiguousarray(x, dtype=np.float32)

    print("# peers: %s (sha256 %s), input %r %s" % (
        a.model, sha256_prefix(a.model), input_name,
        "x".join(map(str, shape))))
    print("# date %s UTC; cpu %s; %d cpus online, %d usable; load %s" % (
        datetime.datetime.now(datetime.timezone.utc).strftime(
            "%Y-%m-%d %H:%M"),
        cpu_model(), os.cpu_count(), len(os.sched_getaffinity(0)),
        " ".join("%.2f" % v for v in os.getloadavg())))
    print("# threads %d; python %s, numpy %s, onnx %s, onnxruntime %s, "
          "openvino %s" % (a.threads, platform.python_version(),
                           np.__version__, onnx.__version__,
                           onnxruntime.__version__, openvino.__version__))

    how = Shared if a.same_process else Isolated
    cfg = {"model": a.model, "threads": a.threads, "lib": a.lib,
           "lib_bf16": a.lib_bf16}
    kinds = (["onnxruntime", "openvino"] +
             ([] if a.no_ov_default else ["openvino-default"]) +
             (["kiln"] if a.lib else []) +
             (["kiln-bf16"] if a.lib_bf16 else []))
    rts = []
    for kind in kinds:
        try:
            rts.append(how(kind, cfg, input_name, x))
        except (OSError, AttributeError, RuntimeError) as e:
            what = {"kiln": a.lib, "kiln-bf16": a.lib_bf16}.get(kind, kind)
            print("peers.py: %s: %s" % (what, e), file=sys.stderr)
            return 2
    for rt in rts:
        print("# %-16s %s; %s" % (rt.name, rt.version, rt.config))

    qstep = output_qstep(a.model)
    if qstep is not None:
        ok, diffs = qcheck(rts, x, shape, qstep, a)
        if not ok and not a.keep_going:
            print("peers.py: outputs disagree; no timing", file=sys.stderr)
            return 1
        return timing(rts, a, diffs, ok)
    ok, diffs = fcheck(rts, x, shape, a)
    if not ok and not a.keep_going:
        print("peers.py: outputs disagree; no timing", file=sys.stderr)
        return 1
    return timing(rts, a, diffs, ok)


def fcheck(rts, x, shape, a):
    """A float model's outputs against ONNX Runtime's (f32), over x and
    a.accuracy more seeded inputs: the largest |difference| over the
    largest |output| of ONNX Runtime's, within --rtol for a runtime that
    computes in f32 and within --bf16-rtol for one that computes in bf16
    (openvino-default where it chose bf16, kiln-bf16); and the share of
    inputs whose top-1 (argmax) is ONNX Runtime's, which must be at least
    --top1-share for a bf16 runtime (and 1 for an f32 one)."""
    xs = [x] + [np.ascontiguousarray(
        np.random.default_rng(a.seed + 1 + k).standard_normal(shape),
        dtype=np.float32) for k in range(a.accuracy)]
    refs = [rts[0].output(xx) for xx in xs]
    scale = float(max(np.abs(r).max() for r in refs))
    ok, diffs = True, {}
    for rt in rts[1:]:
        bf16 = rt.precision != "f32"
        rtol = a.bf16_rtol if bf16 else a.rtol
        worst, top1, fine = 0.0, 0, True
        for xx, ref in zip(xs, refs):
            y = rt.output(xx).reshape(-1)
            r = ref.reshape(-1)
            if y.size != r.size:
                print("%s: output has %d elements, onnxruntime's %d" % (
                    rt.name, y.size, r.size))
                fine = False
                break
            m = float(np.abs(r).max())
            d = float(np.abs(y - r).max())
            worst = max(worst, d / m if m > 0 else d)
            fine = fine and bool(np.isfinite(y).all())
            top1 += int(np.argmax(y) == np.argmax(r))
        share = top1 / len(xs)
        agree = (fine and worst <= rtol and
                 share >= (a.top1_share if bf16 else 1.0))
        if rt.name.startswith("kiln") and rt.trained == 0:
            print("kiln: the library's weights are random "
                  "(kiln_model_trained() = 0), not the model's")
            agree = False
        diffs[rt.name] = {"max_rel_diff": worst, "precision": rt.precision,
                          "rtol": rtol, "top1_same": top1,
                          "inputs": len(xs)}
        print("check %-16s (%s) largest |diff| vs onnxruntime %.3g of the "
              "largest |y| (tolerance %g; max |y| %.4g); top-1 the same on "
              "%d of %d inputs: %s" % (
                  rt.name, rt.precision, worst, rtol, scale, top1, len(xs),
                  "agree" if agree else "DISAGREE"))
        ok = ok and agree
    return ok, diffs


def qcheck(rts, x, shape, qstep, a):
    """A quantized model's outputs against ONNX Runtime's, in steps of
    qstep, over x and a.accuracy more seeded inputs."""
    xs = [x] + [np.ascontiguousarray(
        np.random.default_rng(a.seed + 1 + k).standard_normal(shape),
        dtype=np.float32) for k in range(a.accuracy)]
    refs = [rts[0].output(xx) for xx in xs]
    print("quantized output: DequantizeLinear scale %.9g (one step); %d "
          "input(s)" % (qstep, len(xs)))
    ok, diffs = True, {}
    for rt in rts[1:]:
        worst, within, total, top1 = 0.0, 0, 0, 0
        for xx, ref in zip(xs, refs):
            y = rt.output(xx).reshape(-1)
            r = ref.reshape(-1)
            if y.size != r.size or not np.isfinite(y).all():
                worst = float("inf")
                continue
            d = np.abs(y - r) / qstep
            worst = max(worst, float(d.max()))
            within += int((d <= 1 + 1e-3).sum())
            total += r.size
            top1 += int(np.argmax(y) == np.argmax(r))
        share = within / total if total else 0.0
        agree = top1 == len(xs) and share >= a.qshare
        if rt.name.startswith("kiln") and rt.trained == 0:
            print("kiln: the library's weights are random "
                  "(kiln_model_trained() = 0), not the model's")
            agree = False
        diffs[rt.name] = {"max_steps": worst, "within_1_step": within,
                          "elements": total, "top1_same": top1,
                          "inputs": len(xs)}
        print("check %-11s vs onnxruntime: largest difference %.3g steps; "
              "%d of %d elements (%.4f%%) within 1 step; top-1 the same on "
              "%d of %d inputs: %s" % (
                  rt.name, worst, within, total, 100.0 * share, top1,
                  len(xs), "agree" if agree else "DISAGREE"))
        ok = ok and agree
    return ok, diffs


def timing(rts, a, diffs, ok):
    for _ in range(a.warmup):
        for rt in rts:
            rt.timed(0)
    ms = {rt.name: [] for rt in rts}
    for r in range(a.runs):
        k = r % len(rts)
        for rt in rts[k:] + rts[:k]:
            time.sleep(a.gap)
            ms[rt.name].append(float(np.median(rt.timed(a.settle, a.block))))
    for rt in rts:
        rt.close()

    st = {n: stats(v) for n, v in ms.items()}
    print("%d warm-up runs each, then %d interleaved rounds of %.2f s idle, "
          "%d untimed + %d timed runs each (a round's figure: their median; "
          "ms):" % (a.warmup, a.runs, a.gap, a.settle, a.block))
    dflt = "openvino-default" in st
    print("%-16s %9s %19s %19s %9s %9s%s" % (
        "runtime", "median", "p10 .. p90", "min .. max", "/openvino",
        "/ort", " %9s" % "/ov-dflt" if dflt else ""))
    for rt in rts:
        s = st[rt.name]
        print("%-16s %9.3f %8.3f .. %-8.3f %8.3f .. %-8.3f %9.3f %9.3f%s" % (
            rt.name, s["median"], s["p10"], s["p90"], s["min"], s["max"],
            s["median"] / st["openvino"]["median"],
            s["median"] / st["onnxruntime"]["median"],
            " %9.3f" % (s["median"] / st["openvino-default"]["median"])
            if dflt else ""))
    print("(ratios of medians: below 1 is faster than the runtime named)")
    print("# precision: %s" % ", ".join("%s %s" % (rt.name, rt.precision)
                                        for rt in rts))
    # The same ratio round by round: each round's runs were back to back,
    # so a round's ratio sees the same load on the machine.
    rr = {}
    skip = {("onnxruntime", "openvino"), ("openvino-default", "openvino"),
            ("openvino-default", "onnxruntime")}
    for base in ("openvino", "onnxruntime", "openvino-default"):
        if base not in ms:
            continue
        for rt in rts:
            if rt.name == base or (base, rt.name) in skip:
                continue  # itself, or the inverse of a ratio printed
            q = np.asarray(ms[rt.name]) / np.asarray(ms[base])
            rr["%s/%s" % (rt.name, base)] = stats(q)
            print("per-round %s / %s: median %.3f, p10 .. p90 %.3f .. %.3f"
                  % (rt.name, base, np.median(q), np.percentile(q, 10),
                     np.percentile(q, 90)))
    print("# load after %s" % " ".join("%.2f" % v for v in os.getloadavg()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "threads": a.threads,
                       "runs": a.runs, "warmup": a.warmup,
                       "settle": a.settle, "block": a.block, "gap": a.gap,
                       "cpu": cpu_model(),
                       "versions": {rt.name: rt.version for rt in rts},
                       "precision": {rt.name: rt.precision for rt in rts},
                       "max_abs_diff_vs_ort": diffs, "agree": ok,
                       "ms": st,
                       "per_round_ratio": rr}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
