"""Golden values for the core math ops: matmul, linear, elementwise arithmetic
with broadcasting, scalar ops, activations, reductions, max, softmax and
log_softmax (with masks), layer_norm, mse_loss, cross_entropy,
padded_cross_entropy and the comparisons. Gradients are of
sum(output * upstream) with a fixed random upstream ("upstream" input).

Inputs are drawn in f32 (so the stored values are exact) and every reference
is computed in f64. `params["op"]` names the rig op; `params["view"]` asks the
C++ test to build a non-contiguous view of an input first ("transpose" of the
last two axes, or "slice": every second element of the last axis).

Run: /usr/bin/python3 tests/golden/gen_ops_math.py  (writes ops_math.json)
"""
import math

import torch
import torch.nn.functional as F

from golden_util import case, write

torch.manual_seed(11)


def rand(*shape, low=-1.0, high=1.0):
    return (torch.rand(shape) * (high - low) + low).float().double()


def leaf(t):
    return t.clone().requires_grad_(True)


def run(out, inputs, upstream=None):
    """Output and the gradients of sum(out * upstream) for the leaves in `inputs`."""
    if upstream is None:
        upstream = rand(*out.shape)
    (out * upstream).sum().backward()
    grads = {k: v.grad for k, v in inputs.items() if v.requires_grad and v.grad is not None}
    return upstream, grads


cases = []
NEG_INF_SENTINEL = -1e30


def add_case(name, inputs, out, params, upstream=None, extra_inputs=None):
    up, grads = run(out, inputs, upstream)
    ins = dict(inputs)
    ins.update(extra_inputs or {})
    ins["upstream"] = up
    cases.append(case(name, ins, {"out": out}, grads, params))


def view_of(t, view):
    if view == "transpose":
        return t.transpose(-1, -2)
    if view == "slice":
        return t[..., ::2]
    return t


# ---- matmul -----------------------------------------------------------------------
for name, sa, sb, ta, tb, va, vb in [
    ("matmul_2d", (3, 4), (4, 5), False, False, None, None),
    ("matmul_2d_ta", (4, 3), (4, 5), True, False, None, None),
    ("matmul_2d_tb", (3, 4), (5, 4), False, True, None, None),
    ("matmul_2d_ta_tb", (4, 3), (5, 4), True, True, None, None),
    ("matmul_batched", (2, 3, 4), (2, 4, 5), False, False, None, None),
    ("matmul_batched_tb", (2, 3, 4), (2, 5, 4), False, True, None, None),
    ("matmul_batch_broadcast", (2, 1, 3, 4), (3, 4, 5), False, False, None, None),
    ("matmul_batched_x_2d", (2, 3, 3, 4), (4, 5), False, False, None, None),
    ("matmul_batched_x_2d_tb", (2, 3, 4), (5, 4), False, True, None, None),
    ("matmul_2d_x_batched", (3, 4), (2, 4, 5), False, False, None, None),
    ("matmul_batched_ta_x_2d", (2, 4, 3), (4, 5), True, False, None, None),
    # Views: a transposed view goes to BLAS as a flag; a strided slice is copied.
    ("matmul_view_transpose", (2, 4, 3), (2, 4, 5), False, False, "transpose", None),
    ("matmul_view_slice", (3, 8), (5, 4), False, True, "slice", None),
    ("matmul_view_both", (5, 4), (5, 8), False, False, "transpose", "slice"),
]:
    a = leaf(rand(*sa))
    b = leaf(rand(*sb))
    av = view_of(a, va)
    bv = view_of(b, vb)
    opa = av.transpose(-1, -2) if ta else av
    opb = bv.transpose(-1, -2) if tb else bv
    add_case(name, {"a": a, "b": b}, opa @ opb,
             {"op": "matmul", "transpose_a": ta, "transpose_b": tb, "view_a": va, "view_b": vb})

# ---- linear -------------------------------------------------------------------------
ACT = {
    "none": lambda t: t,
    "relu": torch.relu,
    "gelu": F.gelu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
}
for name, xs, out_features, bias, act in [
    ("linear_2d", (4, 6), 5, True, "none"),
    ("linear_3d_relu", (2, 3, 6), 5, True, "relu"),
    ("linear_3d_gelu", (2, 3, 6), 7, True, "gelu"),
    ("linear_tanh", (5, 4), 3, True, "tanh"),
    ("linear_sigmoid_nobias", (5, 4), 3, False, "sigmoid"),
    ("linear_nobias", (3, 2, 4), 6, False, "none"),
]:
    x = leaf(rand(*xs))
    w = leaf(rand(out_features, xs[-1]))
    ins = {"x": x, "weight": w}
    if bias:
        ins["bias"] = leaf(rand(out_features))
    y = F.linear(x, w, ins.get("bias"))
    add_case(name, ins, ACT[act](y), {"op": "linear", "activation": act})

# ---- binary arithmetic with broadcasting ---------------------------------------------
for opname, fn in [("add", torch.add), ("sub", torch.sub), ("mul", torch.mul),
                   ("div", torch.div)]:
    for suffix, sa, sb in [
        ("same", (2, 3), (2, 3)),
        ("bias", (2, 3, 4), (4,)),
        ("column", (2, 3, 4), (3, 1)),
        ("both", (2, 1, 4), (3, 1)),
        ("scalar_tensor", (3, 2), ()),
    ]:
        a = leaf(rand(*sa))
        # Divisors away from 0.
        b = leaf(rand(*sb, low=0.5, high=1.5) if opname == "div" else rand(*sb))
        add_case(f"{opname}_{suffix}", {"a": a, "b": b}, fn(a, b), {"op": opname})
    # A non-contiguous operand.
    a = leaf(rand(3, 4))
    b = leaf(rand(4, 3, low=0.5, high=1.5))
    add_case(f"{opname}_view", {"a": a, "b": b}, fn(a, b.transpose(0, 1)),
             {"op": opname, "view_b": "transpose"})

# ---- scalar ops and activations ----------------------------------------------------------
for name, op, fn, scalar, low, high in [
    ("add_scalar", "add_scalar", lambda t: t + 0.75, 0.75, -1, 1),
    ("mul_scalar", "mul_scalar", lambda t: t * -2.5, -2.5, -1, 1),
    ("pow_scalar_2", "pow_scalar", lambda t: t ** 2, 2.0, -1, 1),
    ("pow_scalar_3", "pow_scalar", lambda t: t ** 3, 3.0, -1, 1),
    ("pow_scalar_half", "pow_scalar", lambda t: t ** 0.5, 0.5, 0.2, 2),
    ("pow_scalar_neg1", "pow_scalar", lambda t: t ** -1, -1.0, 0.2, 2),
    ("pow_scalar_1_7", "pow_scalar", lambda t: t ** 1.7, 1.7, 0.2, 2),
    ("neg", "neg", torch.neg, None, -1, 1),
    ("exp", "exp", torch.exp, None, -3, 3),
    ("log", "log", torch.log, None, 0.1, 3),
    ("sqrt", "sqrt", torch.sqrt, None, 0.1, 3),
    ("rsqrt", "rsqrt", torch.rsqrt, None, 0.1, 3),
    ("relu", "relu", torch.relu, None, -1, 1),
    ("gelu", "gelu", F.gelu, None, -4, 4),
    ("gelu_tanh", "gelu_tanh", lambda t: F.gelu(t, approximate="tanh"), None, -4, 4),
    ("tanh", "tanh", torch.tanh, None, -4, 4),
    ("sigmoid", "sigmoid", torch.sigmoid, None, -6, 6),
]:
    x = leaf(rand(3, 7, low=low, high=high))
    params = {"op": op}
    if scalar is not None:
        params["scalar"] = scalar
    add_case(name, {"x": x}, fn(x), params)

# Activations at a wider range, where the vectorised approximations are tested hardest.
wide = torch.linspace(-12, 12, 97, dtype=torch.float32).double()
for name, op, fn in [("gelu_wide", "gelu", F.gelu),
                     ("gelu_tanh_wide", "gelu_tanh", lambda t: F.gelu(t, approximate="tanh")),
                     ("tanh_wide", "tanh", torch.tanh), ("sigmoid_wide", "sigmoid", torch.sigmoid),
                     ("exp_wide", "exp", torch.exp)]:
    x = leaf(wide)
    add_case(name, {"x": x}, fn(x), {"op": op})

# ---- reductions ----------------------------------------------------------------------------
for name, shape, axes, keepdim, mean in [
    ("sum_all", (3, 4), None, False, False),
    ("mean_all", (2, 3, 4), None, False, True),
    ("sum_axis1", (2, 3, 4), [1], False, False),
    ("sum_axes_0_2", (2, 3, 4), [0, 2], False, False),
    ("sum_last_keepdim", (2, 3, 4), [-1], True, False),
    ("mean_axis0", (5, 3), [0], False, True),
    ("mean_axes_1_2_keepdim", (2, 3, 4), [1, 2], True, True),
    ("mean_axes_neg", (2, 3, 4, 2), [-3, 0], False, True),
]:
    x = leaf(rand(*shape))
    if axes is None:
        out = x.mean() if mean else x.sum()
    else:
        out = x.mean(dim=axes, keepdim=keepdim) if mean else x.sum(dim=axes, keepdim=keepdim)
    add_case(name, {"x": x}, out,
             {"op": "mean" if mean else "sum", "axes": axes, "keepdim": keepdim})

# max: ties go to the first maximal element (rounded values make ties).
for name, shape, axis, keepdim in [
    ("max_last", (3, 5), -1, False),
    ("max_axis0_keepdim", (4, 3), 0, True),
    ("max_middle_ties", (2, 6, 3), 1, False),
]:
    x = leaf(torch.round(rand(*shape) * 2) / 2)
    values, index = x.max(dim=axis, keepdim=keepdim)
    # torch's max gradient goes to the index it returns; make sure that is the first maximum.
    first = (x == x.max(dim=axis, keepdim=True).values).double().argmax(dim=axis, keepdim=keepdim)
    assert torch.equal(index, first), name
    add_case(name, {"x": x}, values, {"op": "max", "axis": axis, "keepdim": keepdim})

# ---- softmax / log_softmax -------------------------------------------------------------------
def masked_softmax(x, axis, mask, log):
    """Reference: excluded entries get probability 0 (log: -inf); rows with
    nothing kept give 0 (log: -inf) and no gradient."""
    if mask is None:
        return (F.log_softmax if log else F.softmax)(x, dim=axis)
    keep = mask.expand(x.shape).bool()
    filled = x.masked_fill(~keep, float("-inf"))
    any_kept = keep.any(dim=axis, keepdim=True)
    safe = torch.where(any_kept, filled, torch.zeros_like(x))
    if log:
        out = F.log_softmax(safe, dim=axis)
        return out.masked_fill(~keep, float("-inf"))
    out = F.softmax(safe, dim=axis)
    return out.masked_fill(~keep, 0.0)


for name, shape, axis, mask_shape, log in [
    ("softmax_last", (3, 7), -1, None, False),
    ("log_softmax_last", (3, 7), -1, None, True),
    ("softmax_axis1", (2, 4, 3), 1, None, False),
    ("log_softmax_axis0", (4, 3), 0, None, True),
    ("softmax_wide_rows", (2, 70), -1, None, False),
    ("softmax_key_mask", (2, 2, 3, 5), -1, (2, 1, 1, 5), False),
    ("softmax_full_mask", (2, 3, 6), -1, (2, 3, 6), False),
    ("log_softmax_key_mask", (2, 3, 5), -1, (2, 1, 5), True),
    ("softmax_mask_axis1", (2, 5, 3), 1, (1, 5, 1), False),
    ("softmax_row_mask", (3, 4), -1, (3, 1), False),
]:
    x = leaf(rand(*shape, low=-3, high=3))
    mask = None
    if mask_shape is not None:
        mask = (torch.rand(mask_shape) > 0.3).to(torch.uint8)
        # At least one fully excluded row where the mask has the row axis.
        if mask_shape[axis] != 1:
            idx = [0] * len(mask_shape)
            idx[axis] = slice(None)
            mask[tuple(idx)] = 0
        else:
            mask.view(-1)[0] = 0
    out = masked_softmax(x, axis, mask, log)
    upstream = rand(*out.shape)
    if log and mask is not None:
        # Excluded outputs are -inf constants; no loss reads them.
        upstream = upstream.masked_fill(~mask.expand(x.shape).bool(), 0.0)
        loss_out = out.masked_fill(~mask.expand(x.shape).bool(), 0.0)
        up, grads = run(loss_out, {"x": x}, upstream)
    else:
        up, grads = run(out, {"x": x}, upstream)
    ins = {"x": x, "upstream": up}
    if mask is not None:
        ins["mask"] = mask
    # JSON has no infinities: -inf is stored as NEG_INF_SENTINEL.
    stored = out.masked_fill(torch.isneginf(out), NEG_INF_SENTINEL)
    cases.append(case(name, ins, {"out": stored}, grads,
                      {"op": "log_softmax" if log else "softmax", "axis": axis,
                       "neg_inf_sentinel": NEG_INF_SENTINEL}))

# ---- layer_norm ---------------------------------------------------------------------------------
for name, shape, affine, eps in [
    ("layer_norm_affine", (2, 3, 8), True, 1e-5),
    ("layer_norm_plain", (4, 6), False, 1e-5),
    ("layer_norm_wide_eps", (3, 37), True, 1e-3),
]:
    x = leaf(rand(*shape, low=-2, high=3))
    ins = {"x": x}
    if affine:
        ins["gamma"] = leaf(rand(shape[-1], low=0.5, high=1.5))
        ins["beta"] = leaf(rand(shape[-1]))
    out = F.layer_norm(x, (shape[-1],), ins.get("gamma"), ins.get("beta"), eps)
    add_case(name, ins, out, {"op": "layer_norm", "eps": eps})

# ---- losses -------------------------------------------------------------------------------------
p = leaf(rand(3, 4))
t = leaf(rand(3, 4))
add_case("mse_loss", {"prediction": p, "target": t}, F.mse_loss(p, t), {"op": "mse_loss"},
         upstream=torch.tensor(0.7, dtype=torch.float64))

for name, n, c, smoothing in [
    ("cross_entropy", 5, 7, 0.0),
    ("cross_entropy_smoothing", 5, 7, 0.1),
    ("cross_entropy_wide", 3, 40, 0.2),
]:
    logits = leaf(rand(n, c, low=-4, high=4))
    labels = torch.randint(0, c, (n,))
    out = F.cross_entropy(logits, labels, label_smoothing=smoothing)
    add_case(name, {"logits": logits}, out, {"op": "cross_entropy", "label_smoothing": smoothing},
             upstream=torch.tensor(1.3, dtype=torch.float64), extra_inputs={"labels": labels})


def padded_xent(logits, labels, weights, smoothing):
    """OpenSeq2Seq's PaddedCrossEntropyLossWithSmoothing (sequence_loss.py), in f64."""
    vocab = logits.shape[-1]
    confidence = 1.0 - smoothing
    low = (1.0 - confidence) / (vocab - 1)
    soft = torch.full(logits.shape, low, dtype=torch.float64)
    soft.scatter_(-1, labels.unsqueeze(-1), confidence)
    xent = -(soft * F.log_softmax(logits, dim=-1)).sum(-1)
    c_log_c = confidence * math.log(confidence) if confidence > 0 else 0.0
    normalizing = -(c_log_c + (vocab - 1) * low * math.log(low + 1e-20))
    xent = (xent - normalizing) * weights
    return (xent * weights).sum() / weights.sum()


for name, b, t, v, smoothing, binary in [
    ("padded_cross_entropy", 2, 4, 6, 0.0, True),
    ("padded_cross_entropy_smoothing", 3, 5, 9, 0.1, True),
    ("padded_cross_entropy_soft_weights", 2, 3, 5, 0.2, False),
]:
    logits = leaf(rand(b, t, v, low=-3, high=3))
    labels = torch.randint(0, v, (b, t))
    labels[0, -1] = 0
    labels[-1, -2:] = 0
    if binary:
        weights = (labels != 0).double()
    else:
        weights = leaf(rand(b, t, low=0.0, high=1.0))
    ins = {"logits": logits}
    if not binary:
        ins["weights"] = weights
    out = padded_xent(logits, labels, weights, smoothing)
    extra = {"labels": labels}
    if binary:
        extra["weights"] = weights
    add_case(name, ins, out, {"op": "padded_cross_entropy", "label_smoothing": smoothing},
             upstream=torch.tensor(0.9, dtype=torch.float64), extra_inputs=extra)

# ---- comparisons (no gradients) -------------------------------------------------------------------
a = torch.tensor([[1, 2, 3], [4, 5, 6]], dtype=torch.int64)
b = torch.tensor([1, 5, 3], dtype=torch.int64)
cases.append(case("equal_broadcast", {"a": a, "b": b}, {"out": a == b}, None, {"op": "equal"}))
x = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]], dtype=torch.float32)
cases.append(case("not_equal_scalar_f32", {"x": x}, {"out": x != 0.0}, None,
                  {"op": "not_equal_scalar", "scalar": 0.0}))
ids = torch.tensor([[3, 0, 7], [0, 0, 2]], dtype=torch.int64)
cases.append(case("not_equal_scalar_i64", {"x": ids}, {"out": ids != 0}, None,
                  {"op": "not_equal_scalar", "scalar": 0.0}))

write("ops_math", cases)
