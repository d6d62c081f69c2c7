#!/usr/bin/env python3
"""onnx_models.py - the ONNX models kiln is tested and benchmarked on.

Subcommands:

  small-cnn OUTDIR
      A small CNN built with onnx.helper (no torch), deterministic (numpy
      seed 18), opset 17, input `x` 1x3x32x32 f32, output `y` 1x10:
        Conv 3->16 3x3 pad 1 + BatchNormalization + Relu
        MaxPool 2x2 stride 2
        Conv 16->16 3x3 pad 1 + BatchNormalization, Add of the pooled
          tensor (residual), Clip(0, 6) (bounds as constant inputs)
        depthwise Conv (group 16) 3x3 pad 1 + BatchNormalization + Clip(0, 6)
        Conv 1x1 16->32 with a bias
        GlobalAveragePool, Flatten, Gemm (transB=1) 32->10 with a bias
      Writes OUTDIR/small_cnn.onnx, OUTDIR/small_cnn.input.npy (f32, C
      order, ~N(0, 1), seed-fixed) and OUTDIR/small_cnn.ort.npy (ONNX
      Runtime's output for that input, CPU EP, f32). These three are the
      files committed under tests/data/onnx/.

  small-cnn-int8 OUTDIR
      A CNN like small-cnn (numpy seed 18, opset 17, x 1x3x32x32 -> y
      1x10): Conv 3->16 3x3 + Relu, depthwise Conv 3x3 + Relu, Conv 1x1
      16->32, GlobalAveragePool, Flatten, Gemm 32->10 (all with biases),
      quantized by onnxruntime.quantization.quantize_static: QDQ format,
      per_channel=True, activations QUInt8, weights QInt8, MinMax
      calibration on 8 seeded N(0, 1) inputs. Writes
      OUTDIR/small_cnn_int8.onnx, .input.npy (f32, seed-fixed),
      .ort.npy (ONNX Runtime's y, CPU EP) and .conv3.ort.npy (ONNX
      Runtime's u8 output of the third conv, 1x32x32x32, as f32).

  small-cnn-qop OUTDIR
      small-cnn-int8's model and calibration quantized with
      quant_format=QuantFormat.QOperator (QLinearConv, com.microsoft
      QLinearGlobalAveragePool and QGemm). Writes OUTDIR/small_cnn_qop.onnx,
      .input.npy (the same input), .ort.npy (ONNX Runtime's y) and
      .gap.ort.npy (ONNX Runtime's u8 pool output, 1x32x1x1, as f32).

  int-ops OUTDIR
      By hand with onnx.helper (numpy seed 18, opset 17, x 1x4x8x8 -> y
      1x10): QuantizeLinear, ConvInteger (constant s8 weight, zero points
      constant), Cast + Mul by a constant, Relu, QuantizeLinear, Flatten,
      MatMulInteger, Cast + Mul. Writes OUTDIR/int_ops.onnx, .input.npy,
      .ort.npy (y) and .acc1.ort.npy (ConvInteger's s32 output, as f32);
      two models kiln refuses: int_ops_wzp.onnx (weight zero point 3)
      and int_ops_dynamic.onnx (DynamicQuantizeLinear, as quantize_dynamic
      writes it); and qlinear_matmul.onnx (Flatten, QuantizeLinear,
      QLinearMatMul with a per-column weight scale, DequantizeLinear) with
      qlinear_matmul.ort.npy (ONNX Runtime's y for int_ops.input.npy).

  residual-cnn OUTDIR
      A residual CNN (numpy seed 18, opset 17, x 1x3x32x32 -> y 1x10):
      Conv 3->16 3x3 + Relu, MaxPool 2x2/2, Conv 16->16 3x3 + Relu, Conv
      16->16 3x3, Add of the pooled tensor, Relu, AveragePool 2x2/2, Conv
      1x1 16->32, GlobalAveragePool, Flatten, Gemm 32->10 (all with
      biases), quantized by quantize_static (per_channel=True, QUInt8
      activations, QInt8 weights, MinMax on 8 seeded inputs) twice:
      QuantFormat.QOperator (QLinearAdd, QLinearAveragePool, MaxPool on
      u8, ...) as OUTDIR/residual_cnn_qop.onnx and QDQ as
      residual_cnn_qdq.onnx. Writes residual_cnn.input.npy (the input of
      both) and, for each, .ort.npy (ONNX Runtime's y) and .add.ort.npy
      (ONNX Runtime's u8 output of the residual add, 1x16x16x16, as f32).

  ops OUTDIR
      Op-family models built with onnx.helper (numpy seed 18), each with
      input `x` and output `y`, every op applied to computed tensors, and
      each with OUTDIR/NAME.input.npy and NAME.ort.npy (ONNX Runtime's y,
      CPU EP, one thread, f32):
        ew_broadcast.onnx (opset 17, x 1x8x6x6 -> y 1x104x6x6): Add, Sub,
          Mul, Div, Pow (by 2, by 3, by 0.5 from a Constant node, and by a
          computed exponent), Max, Min, Sqrt, Neg, Exp, Erf, Reciprocal,
          between x, its ReduceMean over axes [2, 3] (keepdims=1, axes an
          attribute) 1x8x1x1, a [6] and a [1,8,1,1] initializer and their
          product 1x8x1x6 (both sides broadcast); the 13 results
          concatenated on axis 1, 8 channels each.
        shape_ops.onnx (opset 18, x 1x12x6x8 -> y 1x4x3x4): Split into 2,
          4, 6 channels (sizes as an input), Concat of the three (reordered,
          one negated) on axis 1, Slice (starts -5 and 1, ends INT64_MAX,
          axes 2 and -1, steps 2), Gather of a scalar index (the axis
          dropped) and of the list [0, 5, 2, 11], Unsqueeze / Squeeze with
          axes inputs, Cast float->float, Expand (to 1x4x3x4, and the
          bidirectional form with shape [4, 1, 1]), ReduceSum and ReduceMean
          with keepdims 0 and 1 (axes inputs).
        mask_ops.onnx (opset 17, x 1x8x16 -> y 1x8x16): a causal attention
          core: Q, K, V = x W (MatMul), Transpose of K, MatMul, Div by
          sqrt(16); the mask from constants in the graph: ConstantOfShape
          [8, 8] of 1 -> Trilu (upper=0) -> Equal 0 -> Where(mask, -inf,
          scores), Not(mask) -> Where(keep, scores, -1e9); Softmax; MatMul
          by V; MatMul by a Transpose of a weight initializer.
        act_ops.onnx (opset 20, x 1x4x8x8 ~N(0, 3^2) -> y 1x40x8x8): Gelu
          approximate=tanh, the same spelled out with Pow / Mul / Add /
          Tanh, HardSwish, HardSigmoid (alpha 1/6), LeakyRelu (0.1), Elu,
          Sigmoid, Tanh, x * Sigmoid(x), Relu; concatenated on axis 1.
      `ops FILE.onnx` of an existing file still prints its op types
      (print-ops FILE.onnx).

  tiny-efficientnet OUTDIR
      An EfficientNet-style CNN in torch (torch seed 18, 17448 parameters,
      every BatchNorm randomized): stem Conv 3->16 3x3 s2 + BN + SiLU;
      MBConv blocks (1x1 expand x4 + BN + SiLU, depthwise 3x3 + BN + SiLU,
      squeeze-excite: AdaptiveAvgPool2d(1), 1x1 conv + SiLU, 1x1 conv +
      Sigmoid, multiply; 1x1 project + BN; residual add when the shapes
      match) 16->16 s1, 16->24 s2, 24->24 s1; head 1x1 conv 24->64 + BN +
      SiLU, AdaptiveAvgPool2d(1), flatten, Linear 64->10; input 1x3x32x32.
      Exported with the legacy exporter at opset 17 twice:
      do_constant_folding=False (BatchNormalization kept) as
      OUTDIR/tiny_efficientnet.onnx and with constant folding (BN folded
      into the convs) as tiny_efficientnet_folded.onnx; writes
      tiny_efficientnet.input.npy (the input of both) and each one's
      .ort.npy.

  tiny-encoder OUTDIR
      torch.nn.TransformerEncoder (torch seed 18): 2 layers, d_model 32, 2
      heads, feed-forward 64 with GELU, batch_first, no dropout, weights
      initialized as the encoder's below; input x 1x8x32. Exported with
      the legacy exporter (opset 17, constant folding on) as
      OUTDIR/tiny_encoder.onnx with tiny_encoder.input.npy and its
      .ort.npy. Its attention's output projection reaches the residual
      add through a Reshape and a Transpose of a size-1 dimension.

  tiny-gpt2-dyn OUTDIR
      One block of tiny-gpt2's decoder exported with its sequence axis
      dynamic (dynamic_axes, traced at 16): every shape after the input is
      computed from Shape in the graph. Writes OUTDIR/tiny_gpt2_dyn.onnx,
      tiny_gpt2_dyn.input8.npy (8 tokens) and tiny_gpt2_dyn.ort8.npy (ONNX
      Runtime's y for it): the model kiln's --seq 8 resizes.

  tiny-gpt2 OUTDIR
      A GPT-2-style decoder in torch (torch seed 18): 2 pre-LayerNorm
      blocks, d_model 64, 4 heads, seq 16; packed QKV (Linear 64->192,
      .split(64, dim=-1)), the causal mask made in forward
      (torch.tril(torch.ones(T, T)), masked_fill(mask == 0, -inf)),
      softmax, output projection, residual adds, MLP 64->256->64 with
      nn.GELU(approximate='tanh'); final LayerNorm; input x 1x16x64 f32 (no
      embedding). Exported with the legacy exporter at opset 17 with its
      default constant folding as OUTDIR/tiny_gpt2.onnx and with
      do_constant_folding=False as tiny_gpt2_nofold.onnx (weights read
      through Transposes, Reshape shapes built by Unsqueeze + Concat);
      writes tiny_gpt2.input.npy and each one's .ort.npy. At opset 17 the
      exporter writes the tanh-GELU as Mul / Add / Tanh (x^3 as x*(x*x))
      and keeps the mask's Trilu / Equal / Cast in both.

  gpt2 OUT.onnx [--layers N] [--d-model D] [--heads H] [--seq T] [--no-fold]
                [--exporter legacy|dynamo]
      tiny-gpt2's decoder at benchmark size (default 12 layers, 768, 12
      heads, seq 128, ~341 MB), input 1xTxD, the legacy exporter (opset
      17, constant folding on unless --no-fold) or the dynamo one.

  torchvision NAME OUT.onnx [--exporter legacy|dynamo] [--fold-bn]
      resnet18, resnet50, mobilenet_v2, efficientnet_b0,
      mobilenet_v3_small, regnet_y_400mf or convnext_tiny (no BatchNorm)
      from torchvision with weights=None,
      every BatchNorm's running mean/var and affine parameters randomized
      (torch seed 18) so that folding BN is exercised, eval(), input
      1x3x224x224, exported at opset 17. The exporter here is the legacy
      TorchScript one (dynamo=False) with constant folding off, so that the
      BatchNormalization nodes stay in the graph (with it on, the legacy
      exporter's default, its eval peephole pass folds them into the convs;
      --fold-bn asks for that). --exporter dynamo uses torch.onnx.export's
      dynamo exporter, the default of torch 2.15 (needs onnxscript): it
      writes opset 18 (its conversion to 17 fails) and its
      optimizer folds BN, GlobalAveragePool becomes ReduceMean.

  encoder OUT.onnx [--layers N] [--exporter legacy|dynamo]
      A BERT-base-like encoder stack: torch.nn.TransformerEncoder of N
      (default 12) TransformerEncoderLayer(d_model=768, nhead=12,
      dim_feedforward=3072, activation='gelu', batch_first=True,
      dropout=0.0), eval, input 1x128x768, opset 17.

  qdq IN.onnx OUT.onnx [--calib N] [--seed S]
      Quantizes an f32 model (one f32 input, static shape; symbolic dims
      read as 1) the way quantize_static writes QDQ models: first
      onnxruntime.quantization.quant_pre_process (shape inference and
      ORT's graph optimizations, BatchNormalization folded), then
      quantize_static with quant_format QDQ, per_channel=True, activations
      QUInt8, weights QInt8, MinMax calibration on N (default 4) N(0, 1)
      inputs drawn with numpy seed S (default 18). Prints the quantized
      model's op counts.

  print-ops FILE.onnx
      Prints the op types of a model and how many of each.

Benchmark models (torchvision, encoder, gpt2) are written outside the
repository and never committed; peers.sh (tools/bench/) runs them.

Packages: numpy, onnx, onnxruntime (small-cnn, small-cnn-int8,
small-cnn-qop, int-ops, residual-cnn, ops); torch too (tiny-efficientnet,
tiny-gpt2, gpt2, encoder) and torchvision (torchvision); onnxscript for
--exporter dynamo. Nothing of the test suite needs them: the tests read
the committed files only. The committed tiny-efficientnet and tiny-gpt2
files were made with torch 2.15.0 and torchvision 0.29.2 from PyPI, onnx
1.23.2, onnxruntime 1.32.0; remade with those, every file comes out the
same bytes.

Through the wrapper, which makes (once) and reuses a virtual environment in
${KILN_MODELS_VENV:-$HOME/.cache/kiln-models-venv}:

  KILN_MODELS_NO_TORCH=1 tools/onnx_models.sh small-cnn tests/data/onnx
  KILN_MODELS_NO_TORCH=1 tools/onnx_models.sh small-cnn-int8 tests/data/onnx
  KILN_MODELS_NO_TORCH=1 tools/onnx_models.sh small-cnn-qop tests/data/onnx
  KILN_MODELS_NO_TORCH=1 tools/onnx_models.sh int-ops tests/data/onnx
  KILN_MODELS_NO_TORCH=1 tools/onnx_models.sh residual-cnn tests/data/onnx
  KILN_MODELS_NO_TORCH=1 tools/onnx_models.sh ops tests/data/onnx
  tools/onnx_models.sh tiny-efficientnet tests/data/onnx
  tools/onnx_models.sh tiny-gpt2 tests/data/onnx
  tools/onnx_models.sh torchvision resnet18 /tmp/kiln-models/resnet18.onnx
  tools/onnx_models.sh torchvision efficientnet_b0 \\
      /tmp/kiln-models/efficientnet_b0.onnx
  tools/onnx_models.sh gpt2 /tmp/kiln-models/gpt2.onnx --layers 12
  tools/onnx_models.sh encoder /tmp/kiln-models/encoder.onnx --layers 12
  KILN_MODELS_NO_TORCH=1 tools/onnx_models.sh qdq \\
      /tmp/kiln-models/resnet18.onnx /tmp/kiln-models/resnet18_int8.onnx

or with a virtual environment of your own:

  python3 -m venv /tmp/kiln-venv
  /tmp/kiln-venv/bin/pip install numpy onnx onnxruntime onnxscript
  /tmp/kiln-venv/bin/pip install torch torchvision   # PyPI; or CPU-only
      # wheels with --index-url https://download.pytorch.org/whl/cpu
  /tmp/kiln-venv/bin/python tools/onnx_models.py small-cnn tests/data/onnx
"""

import argparse
import collections
import os
import sys

SEED = 18
OPSET = 17
TORCHVISION_MODELS = ("resnet18", "resnet50", "mobilenet_v2",
                      "efficientnet_b0", "mobilenet_v3_small",
                      "regnet_y_400mf", "convnext_tiny")


def cnn_model(nodes, name, inits):
    """The checked model of graph name: nodes reading x (f32 1x3x32x32)
    into y (f32 1x10), initializers inits."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits)
    model = helper.make_model(
        graph, producer_name="kiln tools/onnx_models.py",
        opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8  # opset 17 needs IR 8; older readers take it
    onnx.checker.check_model(model, full_check=True)
    return model


def calib_reader(calib, name):
    """An onnxruntime calibration reader of the arrays calib as input
    name, one at a time."""
    from onnxruntime import quantization as q

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            v = next(self.it, None)
            return None if v is None else {name: v}

    return Reader()


def quantize(model, fname, path, calib, fmt):
    """model (saved as fname in a temporary directory) quantized by
    quantize_static into path in format fmt: per-channel s8 weights, u8
    activations, MinMax calibration on calib (input x)."""
    import tempfile
    import onnx
    from onnxruntime import quantization as q

    with tempfile.TemporaryDirectory() as tmp:
        fp = os.path.join(tmp, fname)
        onnx.save(model, fp)
        q.quantize_static(
            fp, path, calib_reader(calib, "x"), quant_format=fmt,
            per_channel=True, activation_type=q.QuantType.QUInt8,
            weight_type=q.QuantType.QInt8,
            calibrate_method=q.CalibrationMethod.MinMax)


def ort_session(qm):
    """ONNX Runtime's CPU session of model qm, on one thread."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(qm.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


def ort_u8_output(path, name, shape, x):
    """ONNX Runtime's value of the u8 tensor name (of shape) in model path
    on input x."""
    import onnx
    from onnx import TensorProto, helper
    qm = onnx.load(path)
    qm.graph.output.append(helper.make_tensor_value_info(
        name, TensorProto.UINT8, shape))
    return ort_session(qm).run([name], {"x": x})[0]


def small_cnn(outdir):
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(SEED)
    inits = []
    nodes = []

    def init(name, arr):
        inits.append(numpy_helper.from_array(
            np.ascontiguousarray(arr, dtype=np.float32), name))
        return name

    def conv_w(name, k, c, r, s):
        fan_in = c * r * s
        return init(name, rng.normal(0.0, np.sqrt(2.0 / fan_in),
                                     (k, c, r, s)))

    def bn(name, x, ch):
        # Non-trivial statistics and affine parameters, so that folding
        # BN into the conv before it is exercised.
        g = init(name + ".gamma", rng.uniform(0.5, 1.5, ch))
        b = init(name + ".beta", rng.normal(0.0, 0.2, ch))
        m = init(name + ".mean", rng.normal(0.0, 0.2, ch))
        v = init(name + ".var", rng.uniform(0.5, 2.0, ch))
        nodes.append(helper.make_node(
            "BatchNormalization", [x, g, b, m, v], [name],
            name=name, epsilon=1e-5))
        return name

    lo = init("clip.min", np.array(0.0))
    hi = init("clip.max", np.array(6.0))

    def clip(name, x):
        nodes.append(helper.make_node("Clip", [x, lo, hi], [name], name=name))
        return name

    def conv(name, x, w, b=None, pad=1, group=1):
        ins = [x, w] + ([b] if b else [])
        nodes.append(helper.make_node(
            "Conv", ins, [name], name=name, pads=[pad] * 4,
            strides=[1, 1], group=group))
        return name

    # Block 1: Conv + BN + Relu, MaxPool.
    t = conv("conv1", "x", conv_w("conv1.w", 16, 3, 3, 3))
    t = bn("bn1", t, 16)
    nodes.append(helper.make_node("Relu", [t], ["relu1"], name="relu1"))
    nodes.append(helper.make_node("MaxPool", ["relu1"], ["pool1"],
                                  name="pool1", kernel_shape=[2, 2],
                                  strides=[2, 2]))
    # Block 2: Conv + BN, residual Add, Clip(0, 6).
    t = conv("conv2", "pool1", conv_w("conv2.w", 16, 16, 3, 3))
    t = bn("bn2", t, 16)
    nodes.append(helper.make_node("Add", [t, "pool1"], ["add2"], name="add2"))
    t = clip("clip2", "add2")
    # Block 3: depthwise Conv + BN + Clip(0, 6).
    t = conv("dw3", t, conv_w("dw3.w", 16, 1, 3, 3), group=16)
    t = bn("bn3", t, 16)
    t = clip("clip3", t)
    # Block 4: Conv 1x1 with a bias.
    t = conv("conv4", t, conv_w("conv4.w", 32, 16, 1, 1),
             init("conv4.b", rng.normal(0.0, 0.1, 32)), pad=0)
    # Head.
    nodes.append(helper.make_node("GlobalAveragePool", [t], ["gap"],
                                  name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flat",
                                  axis=1))
    nodes.append(helper.make_node(
        "Gemm", ["flat", init("fc.w", rng.normal(0.0, np.sqrt(1 / 32),
                                                 (10, 32))),
                 init("fc.b", rng.normal(0.0, 0.1, 10))],
        ["y"], name="fc", transB=1))

    model = cnn_model(nodes, "small_cnn", inits)

    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, "small_cnn.onnx")
    onnx.save(model, path)
    np.save(os.path.join(outdir, "small_cnn.input.npy"),
            np.ascontiguousarray(x))
    y = ort_run(path, x)
    np.save(os.path.join(outdir, "small_cnn.ort.npy"),
            np.ascontiguousarray(y, dtype=np.float32))
    print("wrote %s (%d bytes), input %s, ORT output %s: %s" % (
        path, os.path.getsize(path), x.shape, y.shape,
        np.array2string(y.ravel(), precision=4)))


def small_cnn_int8(outdir, qop=False):
    """A small CNN quantized the way onnxruntime.quantization.quantize_static
    writes QDQ models (per-channel s8 weights, u8 activations); qop: in the
    operator format (QLinearConv, ...) as small_cnn_qop.*."""
    import numpy as np
    from onnx import helper, numpy_helper
    from onnxruntime import quantization as q

    rng = np.random.default_rng(SEED)
    inits = []
    nodes = []

    def init(name, arr):
        inits.append(numpy_helper.from_array(
            np.ascontiguousarray(arr, dtype=np.float32), name))
        return name

    def conv(name, x, k, c, r, pad, group=1):
        fan_in = c * r * r
        w = init(name + ".w", rng.normal(0.0, np.sqrt(2.0 / fan_in),
                                         (k, c, r, r)))
        b = init(name + ".b", rng.normal(0.0, 0.1, k))
        nodes.append(helper.make_node(
            "Conv", [x, w, b], [name], name=name, pads=[pad] * 4,
            strides=[1, 1], group=group))
        return name

    def relu(name, x):
        nodes.append(helper.make_node("Relu", [x], [name], name=name))
        return name

    t = relu("relu1", conv("conv1", "x", 16, 3, 3, 1))
    t = relu("relu2", conv("dw2", t, 16, 1, 3, 1, group=16))
    t = conv("conv3", t, 32, 16, 1, 0)
    nodes.append(helper.make_node("GlobalAveragePool", [t], ["gap"],
                                  name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flat",
                                  axis=1))
    nodes.append(helper.make_node(
        "Gemm", ["flat", init("fc.w", rng.normal(0.0, np.sqrt(1 / 32),
                                                 (10, 32))),
                 init("fc.b", rng.normal(0.0, 0.1, 10))],
        ["y"], name="fc", transB=1))
    model = cnn_model(nodes, "small_cnn_int8", inits)

    calib = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
             for _ in range(8)]

    os.makedirs(outdir, exist_ok=True)
    base = "small_cnn_qop" if qop else "small_cnn_int8"
    path = os.path.join(outdir, base + ".onnx")
    quantize(model, "small_cnn_f32.onnx", path, calib,
             q.QuantFormat.QOperator if qop else q.QuantFormat.QDQ)
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(os.path.join(outdir, base + ".input.npy"),
            np.ascontiguousarray(x))
    y = ort_run(path, x)
    np.save(os.path.join(outdir, base + ".ort.npy"),
            np.ascontiguousarray(y, dtype=np.float32))
    if qop:
        # QLinearGlobalAveragePool's u8 output too (32 values, as f32)
        g = ort_u8_output(path, "gap_quantized", [1, 32, 1, 1], x)
        np.save(os.path.join(outdir, base + ".gap.ort.npy"),
                np.ascontiguousarray(g, dtype=np.float32))
        print_ops(path)
        print("wrote %s (%d bytes), ORT output %s" % (
            path, os.path.getsize(path),
            np.array2string(y.ravel(), precision=4)))
        return
    # The u8 output of the third conv as well (32768 values, stored as
    # f32): the quantized layers compared element by element.
    c3 = ort_u8_output(path, "conv3_QuantizeLinear_Output", [1, 32, 32, 32], x)
    np.save(os.path.join(outdir, "small_cnn_int8.conv3.ort.npy"),
            np.ascontiguousarray(c3, dtype=np.float32))
    print_ops(path)
    print("wrote %s (%d bytes), ORT output %s" % (
        path, os.path.getsize(path), np.array2string(y.ravel(), precision=4)))


def residual_cnn(outdir):
    """A small residual CNN quantized by quantize_static twice: in the
    operator format (QLinearAdd, QLinearAveragePool, MaxPool on u8) as
    residual_cnn_qop.*, and in QDQ format (DequantizeLinear -> Add ->
    QuantizeLinear) as residual_cnn_qdq.*."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime import quantization as q

    rng = np.random.default_rng(SEED)
    inits = []
    nodes = []

    def init(name, arr):
        inits.append(numpy_helper.from_array(
            np.ascontiguousarray(arr, dtype=np.float32), name))
        return name

    def conv(name, x, k, c, r, pad):
        w = init(name + ".w", rng.normal(0.0, np.sqrt(2.0 / (c * r * r)),
                                         (k, c, r, r)))
        b = init(name + ".b", rng.normal(0.0, 0.1, k))
        nodes.append(helper.make_node(
            "Conv", [x, w, b], [name], name=name, pads=[pad] * 4,
            strides=[1, 1]))
        return name

    def node(op, name, ins, **kw):
        nodes.append(helper.make_node(op, ins, [name], name=name, **kw))
        return name

    t = node("Relu", "relu1", [conv("conv1", "x", 16, 3, 3, 1)])
    p = node("MaxPool", "pool1", [t], kernel_shape=[2, 2], strides=[2, 2])
    t = node("Relu", "relu2a", [conv("conv2a", p, 16, 16, 3, 1)])
    t = conv("conv2b", t, 16, 16, 3, 1)
    t = node("Relu", "relu2", [node("Add", "add2", [t, p])])
    t = node("AveragePool", "apool", [t], kernel_shape=[2, 2],
             strides=[2, 2])
    t = conv("conv3", t, 32, 16, 1, 0)
    t = node("GlobalAveragePool", "gap", [t])
    t = node("Flatten", "flat", [t], axis=1)
    nodes.append(helper.make_node(
        "Gemm", [t, init("fc.w", rng.normal(0.0, np.sqrt(1 / 32), (10, 32))),
                 init("fc.b", rng.normal(0.0, 0.1, 10))],
        ["y"], name="fc", transB=1))
    model = cnn_model(nodes, "residual_cnn", inits)
    calib = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
             for _ in range(8)]
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    os.makedirs(outdir, exist_ok=True)
    np.save(os.path.join(outdir, "residual_cnn.input.npy"),
            np.ascontiguousarray(x))
    for fmt, base in ((q.QuantFormat.QOperator, "residual_cnn_qop"),
                      (q.QuantFormat.QDQ, "residual_cnn_qdq")):
        path = os.path.join(outdir, base + ".onnx")
        quantize(model, "residual_cnn_f32.onnx", path, calib, fmt)
        # y, and the u8 output of the residual add (its quantized value,
        # 1x16x16x16, as f32)
        qm = onnx.load(path)
        addq = [n.output[0] for n in qm.graph.node
                if n.op_type in ("QLinearAdd", "QuantizeLinear") and
                n.output[0].startswith(("add2", "relu2"))][-1]
        qm.graph.output.append(helper.make_tensor_value_info(
            addq, TensorProto.UINT8, [1, 16, 16, 16]))
        y, a = ort_session(qm).run(["y", addq], {"x": x})
        np.save(os.path.join(outdir, base + ".ort.npy"),
                np.ascontiguousarray(y, dtype=np.float32))
        np.save(os.path.join(outdir, base + ".add.ort.npy"),
                np.ascontiguousarray(a, dtype=np.float32))
        print_ops(path)
        print("wrote %s (%d bytes), add output %s, ORT output %s" % (
            path, os.path.getsize(path), addq,
            np.array2string(y.ravel(), precision=4)))


def int_ops(outdir):
    """MatMulInteger and ConvInteger by hand (onnx.helper), constant s8
    weights and zero points, each s32 result scaled back to f32 by Cast and
    a Mul by a constant; plus two models kiln refuses."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(SEED)

    def t(name, arr, dt):
        return numpy_helper.from_array(np.asarray(arr, dtype=dt), name)

    def save(model, name):
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        path = os.path.join(outdir, name)
        onnx.save(model, path)
        print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))
        return path

    def model(nodes, inits, name, outs, opsets=None):
        g = helper.make_graph(
            nodes, name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                           [1, 4, 8, 8])],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, s)
             for o, s in outs], inits)
        return helper.make_model(
            g, producer_name="kiln tools/onnx_models.py",
            opset_imports=opsets or [helper.make_opsetid("", OPSET)])

    os.makedirs(outdir, exist_ok=True)
    inits = [
        t("x_scale", 0.04, np.float32), t("x_zp", 120, np.uint8),
        t("cw", rng.integers(-127, 128, (8, 4, 3, 3)), np.int8),
        t("cw_zp", 0, np.int8),
        t("c_scale", 0.04 * 0.01, np.float32),
        t("r_scale", 0.05, np.float32), t("r_zp", 0, np.uint8),
        t("mw", rng.integers(-127, 128, (512, 10)), np.int8),
        t("m_scale", 0.05 * 0.002, np.float32),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"],
                         name="xq"),
        helper.make_node("ConvInteger", ["xq", "cw", "x_zp", "cw_zp"],
                         ["acc1"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Cast", ["acc1"], ["acc1f"], name="cast1",
                         to=TensorProto.FLOAT),
        helper.make_node("Mul", ["acc1f", "c_scale"], ["c"], name="scale1"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("QuantizeLinear", ["r", "r_scale", "r_zp"], ["rq"],
                         name="rq"),
        helper.make_node("Flatten", ["rq"], ["flat"], name="flat", axis=1),
        helper.make_node("MatMulInteger", ["flat", "mw", "r_zp"], ["acc2"],
                         name="matmul"),
        helper.make_node("Cast", ["acc2"], ["acc2f"], name="cast2",
                         to=TensorProto.FLOAT),
        helper.make_node("Mul", ["acc2f", "m_scale"], ["y"], name="scale2"),
    ]
    path = save(model(nodes, inits, "int_ops", [("y", [1, 10])]),
                "int_ops.onnx")
    x = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    np.save(os.path.join(outdir, "int_ops.input.npy"), x)
    y = ort_run(path, x)
    np.save(os.path.join(outdir, "int_ops.ort.npy"),
            np.ascontiguousarray(y, dtype=np.float32))
    # ConvInteger's s32 output too (512 values, exact as f32)
    m = onnx.load(path)
    m.graph.output.append(helper.make_tensor_value_info(
        "acc1", TensorProto.INT32, [1, 8, 8, 8]))
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    acc = sess.run(["acc1"], {"x": x})[0]
    assert np.abs(acc).max() < (1 << 24)
    np.save(os.path.join(outdir, "int_ops.acc1.ort.npy"),
            np.ascontiguousarray(acc, dtype=np.float32))
    print("ORT output %s" % np.array2string(y.ravel(), precision=4))

    # Refused: ConvInteger by a weight with a zero point other than 0 ...
    bad = [t("cw_zp", 3, np.int8) if i.name == "cw_zp" else i for i in inits]
    save(model(nodes, bad, "int_ops_wzp", [("y", [1, 10])]),
         "int_ops_wzp.onnx")
    # ... and dynamic quantization (DynamicQuantizeLinear: the activation's
    # scale and zero point computed at run time), as quantize_dynamic
    # writes it.
    dyn = [
        helper.make_node("Flatten", ["x"], ["xf"], name="flat", axis=1),
        helper.make_node("DynamicQuantizeLinear", ["xf"],
                         ["xq", "xq_scale", "xq_zp"], name="dql"),
        helper.make_node("MatMulInteger", ["xq", "dw", "xq_zp"], ["acc"],
                         name="matmul"),
        helper.make_node("Cast", ["acc"], ["accf"], name="cast",
                         to=TensorProto.FLOAT),
        helper.make_node("Mul", ["xq_scale", "dw_scale"], ["s"],
                         name="scales"),
        helper.make_node("Mul", ["accf", "s"], ["y"], name="scale"),
    ]
    save(model(dyn, [t("dw", rng.integers(-127, 128, (256, 10)), np.int8),
                     t("dw_scale", 0.01, np.float32)],
               "int_ops_dynamic", [("y", [1, 10])]),
         "int_ops_dynamic.onnx")

    # QLinearMatMul (per-column weight scale) between QuantizeLinear and
    # DequantizeLinear, on the same input
    qmm = [
        helper.make_node("Flatten", ["x"], ["xf"], name="flat", axis=1),
        helper.make_node("QuantizeLinear", ["xf", "x_scale", "x_zp"], ["xq"],
                         name="xq"),
        helper.make_node("QLinearMatMul",
                         ["xq", "x_scale", "x_zp", "qw", "qw_scale", "qw_zp",
                          "y_scale", "y_zp"], ["yq"], name="qmatmul"),
        helper.make_node("DequantizeLinear", ["yq", "y_scale", "y_zp"], ["y"],
                         name="y"),
    ]
    path = save(model(qmm, [
        t("x_scale", 0.04, np.float32), t("x_zp", 120, np.uint8),
        t("qw", rng.integers(-127, 128, (256, 10)), np.int8),
        t("qw_scale", rng.uniform(0.001, 0.004, 10), np.float32),
        t("qw_zp", np.zeros(10), np.int8),
        t("y_scale", 0.3, np.float32), t("y_zp", 128, np.uint8)],
        "qlinear_matmul", [("y", [1, 10])]), "qlinear_matmul.onnx")
    y = ort_run(path, x)
    np.save(os.path.join(outdir, "qlinear_matmul.ort.npy"),
            np.ascontiguousarray(y, dtype=np.float32))
    print("ORT output %s" % np.array2string(y.ravel(), precision=4))


def graph_model(nodes, inits, name, x_shape, y_shape, opset):
    """The checked model of graph name: nodes reading x (f32 x_shape)
    into y (f32 y_shape), initializers inits, at opset (IR 8 up to opset
    18, IR 9 for 19 and 20)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        inits)
    model = helper.make_model(
        graph, producer_name="kiln tools/onnx_models.py",
        opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset <= 18 else 9
    onnx.checker.check_model(model, full_check=True)
    return model


class GraphBuilder:
    """Nodes and initializers of an onnx.helper graph, named as they are
    made."""

    def __init__(self):
        self.nodes = []
        self.inits = []

    def f32(self, name, arr):
        """An f32 initializer (a 0-d array for a scalar: np.array, as
        np.ascontiguousarray makes it 1-d)."""
        import numpy as np
        from onnx import numpy_helper
        self.inits.append(numpy_helper.from_array(
            np.array(arr, dtype=np.float32, order="C"), name))
        return name

    def i64(self, name, arr):
        import numpy as np
        from onnx import numpy_helper
        self.inits.append(numpy_helper.from_array(
            np.array(arr, dtype=np.int64, order="C"), name))
        return name

    def const_node(self, name, arr):
        """A Constant node (as exports without constant folding write
        them) of the f32 array arr."""
        import numpy as np
        from onnx import helper, numpy_helper
        self.nodes.append(helper.make_node(
            "Constant", [], [name], name=name,
            value=numpy_helper.from_array(
                np.array(arr, dtype=np.float32, order="C"), name)))
        return name

    def op(self, op, name, ins, nout=1, **kw):
        """Node op of inputs ins; its output is name (nout == 1) or
        name_0 ... (a list)."""
        from onnx import helper
        outs = [name] if nout == 1 else ["%s_%d" % (name, i)
                                         for i in range(nout)]
        self.nodes.append(helper.make_node(op, ins, outs, name=name, **kw))
        return outs[0] if nout == 1 else outs


def write_case(outdir, base, model, x):
    """Saves model as OUTDIR/base.onnx, x as base.input.npy and ONNX
    Runtime's y (CPU EP, one thread, f32) as base.ort.npy; prints the op
    types. Returns y."""
    import numpy as np
    import onnx
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, base + ".onnx")
    onnx.save(model, path)
    np.save(os.path.join(outdir, base + ".input.npy"),
            np.ascontiguousarray(x, dtype=np.float32))
    y = ort_run(path, x)
    want = [d.dim_value for d in
            model.graph.output[0].type.tensor_type.shape.dim]
    assert list(y.shape) == want, (base, y.shape, want)
    assert np.isfinite(y).all(), base
    np.save(os.path.join(outdir, base + ".ort.npy"),
            np.ascontiguousarray(y, dtype=np.float32))
    print_ops(path)
    print("wrote %s (%d bytes), input %s, ORT y %s, |y| max %.4g" % (
        path, os.path.getsize(path), list(x.shape), list(y.shape),
        float(np.abs(y).max())))
    return y


def ew_broadcast_model(rng):
    """Element-wise ops between computed tensors of different broadcastable
    shapes (opset 17: ReduceMean's axes an attribute). x 1x8x6x6; y
    1x104x6x6, the 13 results concatenated on axis 1, 8 channels each."""
    import numpy as np
    g = GraphBuilder()
    c6 = g.f32("c6", rng.normal(0.0, 0.5, 6))            # [6]
    c8 = g.f32("c8", rng.uniform(0.5, 1.5, (1, 8, 1, 1)))  # [1,8,1,1]
    two = g.f32("two", np.array(2.0))
    three = g.f32("three", np.array(3.0))
    one = g.f32("one", np.array(1.0))
    half = g.const_node("half", np.array(0.5))
    m = g.op("ReduceMean", "m", ["x"], axes=[2, 3], keepdims=1)  # 1x8x1x1
    em = g.op("Exp", "exp_m", [m])                        # > 0, 1x8x1x1
    mc = g.op("Mul", "m_c6", [m, c6])                     # 1x8x1x6 (both)
    sg = g.op("Sigmoid", "sig_x", ["x"])
    base = g.op("Add", "base", [sg, one])                 # in (1, 2)
    t = []
    t.append(g.op("Add", "t_add", ["x", m]))              # x + 1x8x1x1
    t.append(g.op("Sub", "t_sub", ["x", c6]))             # x - [6]
    t.append(g.op("Mul", "t_mul", [t[0], c8]))            # * [1,8,1,1]
    t.append(g.op("Div", "t_div", [t[1], em]))            # / computed
    t.append(g.op("Pow", "t_pow2", [t[0], two]))
    t.append(g.op("Pow", "t_pow3", [t[1], three]))
    t.append(g.op("Pow", "t_powh", [base, half]))         # sqrt of (1, 2)
    e = g.op("Sigmoid", "exponent", [mc])                 # 1x8x1x6 in (0,1)
    t.append(g.op("Pow", "t_powc", [base, e]))            # computed exponent
    t.append(g.op("Max", "t_max", ["x", g.op("Neg", "neg_m", [m])]))
    t.append(g.op("Min", "t_min", [t[2], mc]))            # vs 1x8x1x6
    sq = g.op("Add", "sq_in", [g.op("Mul", "xx", ["x", "x"]), em])
    t.append(g.op("Sqrt", "t_sqrt", [sq]))                # of a positive
    t.append(g.op("Erf", "t_erf", ["x"]))
    t.append(g.op("Reciprocal", "t_recip", [base]))
    g.op("Concat", "y", t, axis=1)
    return graph_model(g.nodes, g.inits, "ew_broadcast", [1, 8, 6, 6],
                       [1, 8 * len(t), 6, 6], 17)


def shape_ops_model():
    """Split / Concat / Slice / Gather / Squeeze / Unsqueeze / Cast / Expand
    / ReduceSum / ReduceMean at opset 18 (every axes list an input). x
    1x12x6x8; y 1x4x3x4."""
    from onnx import TensorProto
    INT64_MAX = (1 << 63) - 1
    g = GraphBuilder()
    s = g.op("Split", "split", ["x", g.i64("split_sizes", [2, 4, 6])],
             nout=3, axis=1)                    # 1x2, 1x4, 1x6 (x6x8)
    c = g.op("Concat", "cat", [s[2], g.op("Neg", "neg_s0", [s[0]]), s[1]],
             axis=1)                            # 1x12x6x8
    sl = g.op("Slice", "slice",
              [c, g.i64("sl_starts", [-5, 1]),
               g.i64("sl_ends", [INT64_MAX, INT64_MAX]),
               g.i64("sl_axes", [2, -1]), g.i64("sl_steps", [2, 2])])
    # dim 2: 1, 3, 5; dim 3: 1, 3, 5, 7 -> 1x12x3x4
    g1 = g.op("Gather", "gather_list", [sl, g.i64("g_idx", [0, 5, 2, 11])],
              axis=1)                           # 1x4x3x4
    g0 = g.op("Gather", "gather_scalar", [sl, g.i64("g_one", 3)],
              axis=1)                           # 1x3x4 (axis dropped)
    u = g.op("Unsqueeze", "unsq", [g0, g.i64("ax1", [1])])   # 1x1x3x4
    a = g.op("Add", "add_gu", [g1, u])          # 1x4x3x4
    cst = g.op("Cast", "cast", [a], to=TensorProto.FLOAT)
    rs1 = g.op("ReduceSum", "rsum_keep", [cst, g.i64("ax3", [3])],
               keepdims=1)                      # 1x4x3x1
    rs0 = g.op("ReduceSum", "rsum_drop", [cst, g.i64("ax13", [1, 3])],
               keepdims=0)                      # 1x3
    rm1 = g.op("ReduceMean", "rmean_keep", [cst, "ax1"],
               keepdims=1)                      # 1x1x3x4
    rm0 = g.op("ReduceMean", "rmean_drop", [cst, g.i64("ax01", [0, 1])],
               keepdims=0)                      # 3x4
    ex1 = g.op("Expand", "expand_keep", [rs1, g.i64("shape_1434",
                                                    [1, 4, 3, 4])])
    ex2 = g.op("Expand", "expand_bidir", [rm1, g.i64("shape_411",
                                                     [4, 1, 1])])  # 1x4x3x4
    sq = g.op("Squeeze", "squeeze", [rm1, "ax1"])            # 1x3x4
    u0 = g.op("Unsqueeze", "unsq_rs0", [rs0, g.i64("ax2", [2])])  # 1x3x1
    y = g.op("Add", "y1", [cst, ex1])
    y = g.op("Sub", "y2", [y, ex2])
    y = g.op("Add", "y3", [y, rm0])
    y = g.op("Add", "y4", [y, sq])
    g.op("Mul", "y", [y, g.op("Sigmoid", "sig_u0", [u0])])
    return graph_model(g.nodes, g.inits, "shape_ops", [1, 12, 6, 8],
                       [1, 4, 3, 4], 18)


def mask_ops_model(rng):
    """A causal-mask attention core (seq 8, dim 16), the mask made of
    constants in the graph. x 1x8x16; y 1x8x16."""
    import numpy as np
    from onnx import TensorProto, helper
    T, D = 8, 16
    g = GraphBuilder()
    w = {k: g.f32("W" + k, rng.normal(0.0, 1 / np.sqrt(D), (D, D)))
         for k in "qkv"}
    # The output projection stored as nn.Linear does, [out, in], read
    # through a Transpose of the initializer (as do_constant_folding=False
    # exports write it).
    wo = g.f32("Wo", rng.normal(0.0, 1 / np.sqrt(D), (D, D)))
    q = g.op("MatMul", "q", ["x", w["q"]])
    k = g.op("MatMul", "k", ["x", w["k"]])
    v = g.op("MatMul", "v", ["x", w["v"]])
    kt = g.op("Transpose", "kt", [k], perm=[0, 2, 1])        # 1x16x8
    sc = g.op("Div", "scores", [g.op("MatMul", "qk", [q, kt]),
                                 g.f32("sqrt_d", np.array(np.sqrt(D)))])
    ones = g.op("ConstantOfShape", "ones", [g.i64("tt", [T, T])],
                value=helper.make_tensor("one", TensorProto.FLOAT, [1],
                                         [1.0]))
    tril = g.op("Trilu", "tril", [ones], upper=0)
    masked = g.op("Equal", "mask", [tril, g.f32("zero", np.array(0.0))])
    s1 = g.op("Where", "where_inf", [masked, g.f32("ninf",
                                                   np.array(-np.inf)), sc])
    keep = g.op("Not", "keep", [masked])
    s2 = g.op("Where", "where_big", [keep, s1,
                                     g.f32("nbig", np.array(-1e9))])
    p = g.op("Softmax", "probs", [s2], axis=-1)
    o = g.op("MatMul", "attn", [p, v])
    wot = g.op("Transpose", "Wo_t", [wo], perm=[1, 0])
    g.op("MatMul", "y", [o, wot])
    return graph_model(g.nodes, g.inits, "mask_ops", [1, T, D], [1, T, D],
                       17)


def act_ops_model():
    """Activations at opset 20 (Gelu approximate=tanh). x 1x4x8x8; y
    1x40x8x8, the 10 results concatenated on axis 1."""
    import numpy as np
    g = GraphBuilder()
    t = []
    t.append(g.op("Gelu", "gelu_tanh", ["x"], approximate="tanh"))
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as the legacy
    # exporter spells nn.GELU(approximate='tanh') before opset 20
    x3 = g.op("Pow", "x3", ["x", g.f32("three", np.array(3.0))])
    inner = g.op("Add", "inner", ["x", g.op("Mul", "cx3", [
        g.f32("c044715", np.array(0.044715)), x3])])
    th = g.op("Tanh", "th", [g.op("Mul", "scaled", [
        g.f32("sqrt2pi", np.array(np.sqrt(2 / np.pi))), inner])])
    onep = g.op("Add", "onep", [g.f32("one", np.array(1.0)), th])
    hx = g.op("Mul", "hx", [g.f32("half", np.array(0.5)), "x"])
    t.append(g.op("Mul", "gelu_spelled", [hx, onep]))
    t.append(g.op("HardSwish", "hardswish", ["x"]))
    t.append(g.op("HardSigmoid", "hardsigmoid", ["x"], alpha=1 / 6,
                  beta=0.5))
    t.append(g.op("LeakyRelu", "leakyrelu", ["x"], alpha=0.1))
    t.append(g.op("Elu", "elu", ["x"], alpha=1.0))
    t.append(g.op("Sigmoid", "sigmoid", ["x"]))
    t.append(g.op("Tanh", "tanh", ["x"]))
    t.append(g.op("Mul", "silu", ["x", g.op("Sigmoid", "sig", ["x"])]))
    # a Relu of the input is kiln's relu task: the model has one to tune
    t.append(g.op("Relu", "relu", ["x"]))
    g.op("Concat", "y", t, axis=1)
    return graph_model(g.nodes, g.inits, "act_ops", [1, 4, 8, 8],
                       [1, 4 * len(t), 8, 8], 20)


def op_models(outdir):
    """ew_broadcast, shape_ops, mask_ops and act_ops (see the docstring),
    each with its input and ONNX Runtime's y."""
    import numpy as np
    rng = np.random.default_rng(SEED)
    write_case(outdir, "ew_broadcast", ew_broadcast_model(rng),
               rng.standard_normal((1, 8, 6, 6)).astype(np.float32))
    write_case(outdir, "shape_ops", shape_ops_model(),
               rng.standard_normal((1, 12, 6, 8)).astype(np.float32))
    write_case(outdir, "mask_ops", mask_ops_model(rng),
               rng.standard_normal((1, 8, 16)).astype(np.float32))
    # x ~N(0, 3^2): past HardSigmoid's and HardSwish's knees at +-3
    write_case(outdir, "act_ops", act_ops_model(),
               (3.0 * rng.standard_normal((1, 4, 8, 8))).astype(np.float32))


def ort_run(path, x):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return sess.run(None, {name: x})[0]


def randomize_bn(model, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    n = 0
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                c = m.num_features
                m.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(c, generator=g) * 1.0 + 0.5)
                m.weight.copy_(torch.rand(c, generator=g) * 1.0 + 0.5)
                m.bias.copy_(torch.randn(c, generator=g) * 0.1)
                n += 1
    return n


def export(model, x, out, exporter, keep_bn=True):
    """Exports at opset 17. The legacy exporter (dynamo=False) in its
    default eval mode folds each BatchNormalization into the Conv before it
    (its eval peephole pass runs with constant folding); keep_bn turns
    constant folding off, which skips that pass, so that the model keeps
    its BatchNormalization nodes for the runtimes (and kiln) to fold.
    Grad stays enabled (as torch.onnx.export leaves it): under no_grad an
    eval TransformerEncoder takes PyTorch's fast path, whose
    aten::_transformer_encoder_layer_fwd the legacy exporter cannot export."""
    import torch
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    if exporter == "dynamo":
        prog = torch.onnx.export(model, (x,), None, opset_version=OPSET,
                                 input_names=["x"], output_names=["y"],
                                 dynamo=True, external_data=False)
        prog.save(out, external_data=False)
    else:
        torch.onnx.export(model, (x,), out, opset_version=OPSET,
                          input_names=["x"], output_names=["y"],
                          dynamo=False, do_constant_folding=not keep_bn)
    print_ops(out)


def torchvision_model(name, out, exporter, keep_bn):
    import torch
    import torchvision
    if name not in TORCHVISION_MODELS:
        sys.exit("onnx_models.py: unknown torchvision model %r (%s)" % (
            name, ", ".join(TORCHVISION_MODELS)))
    torch.manual_seed(SEED)
    model = getattr(torchvision.models, name)(weights=None)
    n = randomize_bn(model, SEED)
    model.eval()
    print("%s: %d BatchNorm layers randomized" % (name, n))
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator()
                    .manual_seed(SEED))
    export(model, x, out, exporter, keep_bn)


def encoder_module(layers, d_model, heads, ff):
    """torch.nn.TransformerEncoder (batch_first, GELU, no dropout), eval."""
    import torch
    torch.manual_seed(SEED)
    layer = torch.nn.TransformerEncoderLayer(
        d_model=d_model, nhead=heads, dim_feedforward=ff, activation="gelu",
        batch_first=True, dropout=0.0)
    model = torch.nn.TransformerEncoder(layer, num_layers=layers,
                                        enable_nested_tensor=False)
    # TransformerEncoder deep-copies one layer N times, and the exporter
    # stores identical initializers once: give every layer weights of its
    # own, so that the model reads 12 layers' weights as BERT-base does.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:
                torch.nn.init.xavier_uniform_(p)
            elif "norm" in name and name.endswith("weight"):
                p.uniform_(0.8, 1.2)
            else:
                p.normal_(0.0, 0.02)
    return model.eval()


def encoder(out, layers, exporter):
    import torch
    model = encoder_module(layers, 768, 12, 3072)
    x = torch.randn(1, 128, 768, generator=torch.Generator()
                    .manual_seed(SEED))
    export(model, x, out, exporter, keep_bn=False)  # nothing to keep


def tiny_encoder(outdir):
    import torch
    model = encoder_module(2, 32, 2, 64)
    x = torch.randn(1, 8, 32, generator=torch.Generator().manual_seed(SEED))
    torch_case(outdir, model, x, [("tiny_encoder", False)])


def tiny_efficientnet_module():
    """An EfficientNet-style CNN small enough for the test data: stem,
    three MBConv blocks with squeeze-excite, head, Linear 10."""
    import torch
    from torch import nn

    def conv_bn(cin, cout, k, s=1, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups,
                            bias=False), nn.BatchNorm2d(cout)]
        if act:
            layers.append(nn.SiLU())
        return nn.Sequential(*layers)

    class SqueezeExcite(nn.Module):
        def __init__(self, ch, sq):
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.reduce = nn.Conv2d(ch, sq, 1)
            self.act = nn.SiLU()
            self.expand = nn.Conv2d(sq, ch, 1)
            self.gate = nn.Sigmoid()

        def forward(self, x):
            s = self.gate(self.expand(self.act(self.reduce(self.pool(x)))))
            return x * s

    class MBConv(nn.Module):
        def __init__(self, cin, cout, expand, stride):
            super().__init__()
            mid = cin * expand
            self.expand = conv_bn(cin, mid, 1)
            self.dw = conv_bn(mid, mid, 3, stride, groups=mid)
            self.se = SqueezeExcite(mid, max(1, cin // 4))
            self.project = conv_bn(mid, cout, 1, act=False)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.project(self.se(self.dw(self.expand(x))))
            return x + y if self.residual else y

    class TinyEfficientNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = conv_bn(3, 16, 3, 2)            # 16x16x16
            self.blocks = nn.Sequential(
                MBConv(16, 16, 4, 1),                   # residual
                MBConv(16, 24, 4, 2),                   # 24x8x8
                MBConv(24, 24, 4, 1))                   # residual
            self.head = conv_bn(24, 64, 1)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            x = self.head(self.blocks(self.stem(x)))
            return self.fc(torch.flatten(self.pool(x), 1))

    return TinyEfficientNet()


def torch_case(outdir, model, x, variants):
    """Exports model (legacy exporter, opset 17) for each (base, keep_bn)
    of variants as OUTDIR/base.onnx with ONNX Runtime's y (CPU EP, one
    thread, f32) as base.ort.npy; x (a torch tensor) as
    OUTDIR/<first base>.input.npy. Prints how far ORT is from torch."""
    import numpy as np
    import torch
    os.makedirs(outdir, exist_ok=True)
    xn = np.ascontiguousarray(x.numpy(), dtype=np.float32)
    np.save(os.path.join(outdir, variants[0][0] + ".input.npy"), xn)
    with torch.no_grad():
        ref = model(x).numpy()
    for base, keep_bn in variants:
        path = os.path.join(outdir, base + ".onnx")
        export(model, x, path, "legacy", keep_bn)
        y = ort_run(path, xn)
        assert y.shape == ref.shape and np.isfinite(y).all(), base
        np.save(os.path.join(outdir, base + ".ort.npy"),
                np.ascontiguousarray(y, dtype=np.float32))
        print("wrote %s (%d bytes), ORT y %s, max |ORT - torch| %.3g "
              "(|y| max %.3g)" % (path, os.path.getsize(path),
                                  list(y.shape),
                                  float(np.abs(y - ref).max()),
                                  float(np.abs(ref).max())))


def tiny_efficientnet(outdir):
    import torch
    torch.manual_seed(SEED)
    model = tiny_efficientnet_module()
    n = randomize_bn(model, SEED)
    model.eval()
    print("tiny_efficientnet: %d BatchNorm layers randomized, %d "
          "parameters" % (n, sum(p.numel() for p in model.parameters())))
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator()
                    .manual_seed(SEED))
    torch_case(outdir, model, x, [("tiny_efficientnet", True),
                                  ("tiny_efficientnet_folded", False)])


def gpt2_module(layers, d_model, heads, seq):
    """A GPT-2-style decoder on embeddings (no token embedding): pre-
    LayerNorm blocks of causal self-attention (packed QKV) and a tanh-GELU
    MLP, a final LayerNorm."""
    import math
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(d_model, 3 * d_model)
            self.c_proj = nn.Linear(d_model, d_model)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(x).split(d_model, dim=-1)
            hd = C // heads
            q = q.view(B, T, heads, hd).transpose(1, 2)
            k = k.view(B, T, heads, hd).transpose(1, 2)
            v = v.view(B, T, heads, hd).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
            mask = torch.tril(torch.ones(T, T))
            att = att.masked_fill(mask == 0, float("-inf"))
            att = torch.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(d_model)
            self.attn = Attention()
            self.ln_2 = nn.LayerNorm(d_model)
            self.mlp = nn.Sequential(
                nn.Linear(d_model, 4 * d_model),
                nn.GELU(approximate="tanh"),
                nn.Linear(4 * d_model, d_model))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            self.h = nn.Sequential(*[Block() for _ in range(layers)])
            self.ln_f = nn.LayerNorm(d_model)

        def forward(self, x):
            return self.ln_f(self.h(x))

    assert d_model % heads == 0
    torch.manual_seed(SEED)
    model = GPT2()
    # nn.Linear's own (seeded) initialization; the LayerNorms' affine
    # parameters drawn around (1, 0) so that they are exercised
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) +
                        0.1 * torch.randn_like(p))
    return model.eval()


def tiny_gpt2(outdir):
    import torch
    model = gpt2_module(2, 64, 4, 16)
    print("tiny_gpt2: %d parameters" %
          sum(p.numel() for p in model.parameters()))
    x = torch.randn(1, 16, 64, generator=torch.Generator().manual_seed(SEED))
    # keep_bn=True is do_constant_folding=False
    torch_case(outdir, model, x, [("tiny_gpt2", False),
                                  ("tiny_gpt2_nofold", True)])


def tiny_gpt2_dyn(outdir):
    """One block of tiny-gpt2's decoder (d_model 64, 4 heads), exported
    with its sequence axis dynamic (traced at 16), so that every shape
    after the input is computed from Shape in the graph: what kiln's
    --seq resizes. Writes OUTDIR/tiny_gpt2_dyn.onnx, an input of 8
    tokens (tiny_gpt2_dyn.input8.npy) and ONNX Runtime's y for it
    (tiny_gpt2_dyn.ort8.npy)."""
    import numpy as np
    import torch
    model = gpt2_module(1, 64, 4, 16)
    x = torch.randn(1, 16, 64, generator=torch.Generator().manual_seed(SEED))
    path = os.path.join(outdir, "tiny_gpt2_dyn.onnx")
    os.makedirs(outdir, exist_ok=True)
    torch.onnx.export(model, (x,), path, opset_version=OPSET,
                      input_names=["x"], output_names=["y"], dynamo=False,
                      dynamic_axes={"x": {1: "seq"}, "y": {1: "seq"}})
    print_ops(path)
    x8 = torch.randn(1, 8, 64, generator=torch.Generator().manual_seed(SEED))
    xn = np.ascontiguousarray(x8.numpy(), dtype=np.float32)
    with torch.no_grad():
        ref = model(x8).numpy()
    y = ort_run(path, xn)
    assert y.shape == (1, 8, 64) and np.isfinite(y).all()
    np.save(os.path.join(outdir, "tiny_gpt2_dyn.input8.npy"), xn)
    np.save(os.path.join(outdir, "tiny_gpt2_dyn.ort8.npy"),
            np.ascontiguousarray(y, dtype=np.float32))
    print("wrote %s (%d bytes), ORT y at seq 8 %s, max |ORT - torch| %.3g" % (
        path, os.path.getsize(path), list(y.shape),
        float(np.abs(y - ref).max())))


def gpt2(out, layers, d_model, heads, seq, fold, exporter="legacy"):
    import torch
    model = gpt2_module(layers, d_model, heads, seq)
    x = torch.randn(1, seq, d_model, generator=torch.Generator()
                    .manual_seed(SEED))
    export(model, x, out, exporter, keep_bn=not fold)


def qdq(src, out, ncalib, seed):
    """src quantized to QDQ (see the docstring) into out."""
    import tempfile
    import numpy as np
    import onnx
    from onnxruntime import quantization as q
    from onnxruntime.quantization.shape_inference import quant_pre_process

    m = onnx.load(src, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    inp = [i for i in m.graph.input if i.name not in inits][0]
    shape = [d.dim_value if d.HasField("dim_value") else 1
             for d in inp.type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)
    calib = [rng.standard_normal(shape).astype(np.float32)
             for _ in range(ncalib)]

    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        pre = os.path.join(tmp, "pre.onnx")
        quant_pre_process(src, pre)
        q.quantize_static(
            pre, out, calib_reader(calib, inp.name),
            quant_format=q.QuantFormat.QDQ,
            per_channel=True, activation_type=q.QuantType.QUInt8,
            weight_type=q.QuantType.QInt8,
            calibrate_method=q.CalibrationMethod.MinMax)
    print_ops(out)
    print("wrote %s (%d bytes), input %s %s" % (
        out, os.path.getsize(out), inp.name, shape))


def print_ops(path):
    import onnx
    m = onnx.load(path, load_external_data=False)
    c = collections.Counter(n.op_type for n in m.graph.node)
    print("%s: opset %s, %d nodes: %s" % (
        path, [(o.domain or "ai.onnx", o.version) for o in m.opset_import],
        len(m.graph.node),
        ", ".join("%s %d" % kv for kv in sorted(c.items()))))


def main():
    ap = argparse.ArgumentParser(
        description="Makes the ONNX models kiln is tested and benchmarked "
                    "on (see the docstring).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("small-cnn")
    p.add_argument("outdir")
    p = sub.add_parser("small-cnn-int8")
    p.add_argument("outdir")
    p = sub.add_parser("small-cnn-qop")
    p.add_argument("outdir")
    p = sub.add_parser("int-ops")
    p.add_argument("outdir")
    p = sub.add_parser("residual-cnn")
    p.add_argument("outdir")
    p = sub.add_parser("torchvision")
    p.add_argument("name", choices=TORCHVISION_MODELS)
    p.add_argument("out")
    p.add_argument("--exporter", choices=["legacy", "dynamo"],
                   default="legacy")
    p.add_argument("--fold-bn", action="store_true",
                   help="legacy exporter: its default constant folding, "
                        "which folds BN into the convs")
    p = sub.add_parser("encoder")
    p.add_argument("out")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--exporter", choices=["legacy", "dynamo"],
                   default="legacy")
    p = sub.add_parser("qdq")
    p.add_argument("src")
    p.add_argument("out")
    p.add_argument("--calib", type=int, default=4)
    p.add_argument("--seed", type=int, default=SEED)
    p = sub.add_parser("ops")
    p.add_argument("outdir", help="OUTDIR: writes the op models there; "
                   "an existing FILE.onnx: prints its op types")
    p = sub.add_parser("tiny-efficientnet")
    p.add_argument("outdir")
    p = sub.add_parser("tiny-gpt2")
    p.add_argument("outdir")
    p = sub.add_parser("tiny-encoder")
    p.add_argument("outdir")
    p = sub.add_parser("tiny-gpt2-dyn")
    p.add_argument("outdir")
    p = sub.add_parser("gpt2")
    p.add_argument("out")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--no-fold", action="store_true",
                   help="do_constant_folding=False (the mask stays a "
                        "subgraph, the weights are read through Transposes)")
    p.add_argument("--exporter", choices=["legacy", "dynamo"],
                   default="legacy")
    p = sub.add_parser("print-ops")
    p.add_argument("file")
    a = ap.parse_args()
    if a.cmd == "small-cnn":
        small_cnn(a.outdir)
    elif a.cmd == "small-cnn-int8":
        small_cnn_int8(a.outdir)
    elif a.cmd == "small-cnn-qop":
        small_cnn_int8(a.outdir, qop=True)
    elif a.cmd == "int-ops":
        int_ops(a.outdir)
    elif a.cmd == "residual-cnn":
        residual_cnn(a.outdir)
    elif a.cmd == "torchvision":
        torchvision_model(a.name, a.out, a.exporter, not a.fold_bn)
    elif a.cmd == "encoder":
        encoder(a.out, a.layers, a.exporter)
    elif a.cmd == "qdq":
        qdq(a.src, a.out, a.calib, a.seed)
    elif a.cmd == "ops":
        if a.outdir.endswith(".onnx") and os.path.isfile(a.outdir):
            print_ops(a.outdir)     # what `ops FILE.onnx` did before
        else:
            op_models(a.outdir)
    elif a.cmd == "tiny-efficientnet":
        tiny_efficientnet(a.outdir)
    elif a.cmd == "tiny-gpt2":
        tiny_gpt2(a.outdir)
    elif a.cmd == "tiny-encoder":
        tiny_encoder(a.outdir)
    elif a.cmd == "tiny-gpt2-dyn":
        tiny_gpt2_dyn(a.outdir)
    elif a.cmd == "gpt2":
        gpt2(a.out, a.layers, a.d_model, a.heads, a.seq, not a.no_fold,
             a.exporter)
    else:
        print_ops(a.file)


if __name__ == "__main__":
    main()
