#!/usr/bin/env python3
"""ov_profile.py - OpenVINO's own per-layer counters for one ONNX model.

Which primitives OpenVINO runs (their exec types name the layouts and
kernels, e.g. brgconv_avx2_1x1_f32) and each node's median real time
over RUNS inferences, the way peers.sh configures it: CPU, LATENCY hint,
INFERENCE_NUM_THREADS, f32 precision (--precision default: OpenVINO's
own choice). Run with the bench virtual environment's python
(peers.sh makes it: ~/.cache/kiln-bench-venv):

    ~/.cache/kiln-bench-venv/bin/python tools/bench/ov_profile.py \\
        mobilenet_v2.onnx --threads 2 --runs 100 --top 60
"""
import argparse

import numpy as np
import openvino as ov


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--precision", default="f32", choices=["f32", "default"])
    a = ap.parse_args()
    cfg = {"PERF_COUNT": "YES", "PERFORMANCE_HINT": "LATENCY",
           "INFERENCE_NUM_THREADS": str(a.threads)}
    if a.precision == "f32":
        cfg["INFERENCE_PRECISION_HINT"] = "f32"
    cm = ov.Core().compile_model(a.model, "CPU", cfg)
    req = cm.create_infer_request()
    shape = [int(d) for d in cm.input(0).shape]
    x = np.random.default_rng(1).random(shape, dtype=np.float32)
    for _ in range(a.warmup):
        req.infer({0: x})
    times = {}
    for _ in range(a.runs):
        req.infer({0: x})
        for p in req.profiling_info:
            if p.status != p.Status.EXECUTED:
                continue
            k = (p.node_name, p.node_type, p.exec_type)
            times.setdefault(k, []).append(p.real_time.total_seconds() * 1e6)
    rows = sorted(((float(np.median(v)), k) for k, v in times.items()),
                  reverse=True)
    print(f"openvino {ov.__version__}: {len(rows)} executed nodes, sum of "
          f"medians {sum(r[0] for r in rows) / 1000:.3f} ms "
          f"({a.runs} runs, {a.threads} threads, precision {a.precision})")
    kinds = {}
    for t, k in rows:
        kinds[k[2]] = kinds.get(k[2], 0) + 1
    print("exec types: " + ", ".join(f"{n} x {e}" for e, n in
                                     sorted(kinds.items(), key=lambda i: -i[1])))
    for t, k in rows[:a.top]:
        print(f"{t:9.1f} us  {k[1]:16s} {k[2]:28s} {k[0]}")


if __name__ == "__main__":
    main()
