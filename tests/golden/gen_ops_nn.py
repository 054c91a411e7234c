"""Golden values for the convolution, pooling, batch-norm and attention ops.

Each case holds the inputs, a fixed random upstream gradient ("upstream"),
the outputs, and the gradients of sum(y * upstream) with respect to the
floating inputs; scalar options are in "params". References are computed in
float64.

Batch norm in training mode also records the running statistics after the
in-place update ("running_mean", "running_var" outputs). Attention is
computed by hand (torch 1.13 has no scaled_dot_product_attention):
softmax(q k^T * scale with excluded keys removed) v, where a query that may
attend to no key gives zeros. Dropout masks are rig's own (Philox), so
attention dropout is tested statistically and by finite differences in the
C++ tests, not here.

Run: /usr/bin/python3 tests/golden/gen_ops_nn.py  (writes tests/golden/ops_nn.json)
"""
import math

import torch
import torch.nn.functional as F

from golden_util import case, write

D = torch.float64
torch.manual_seed(7)


def rnd(*shape, scale=1.0):
    # Inputs with three decimals keep the committed JSON small.
    return torch.round(torch.randn(*shape, dtype=D) * scale * 1000) / 1000


def leaves(tensors):
    return {k: v.clone().requires_grad_(True) for k, v in tensors.items()}


def grads_of(y, upstream, inputs, names):
    (y * upstream).sum().backward()
    return {n: inputs[n].grad for n in names}


# ---- conv2d ------------------------------------------------------------------
def conv_case(name, x_shape, w_shape, bias, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
              groups=1):
    data = {"x": rnd(*x_shape), "weight": rnd(*w_shape, scale=0.5)}
    if bias:
        data["bias"] = rnd(w_shape[0], scale=0.5)
    t = leaves(data)
    y = F.conv2d(t["x"], t["weight"], t.get("bias"), stride=stride, padding=padding,
                 dilation=dilation, groups=groups)
    upstream = rnd(*y.shape)
    grads = grads_of(y, upstream, t, list(data))
    params = {"stride_h": stride[0], "stride_w": stride[1], "pad_h": padding[0],
              "pad_w": padding[1], "dilation_h": dilation[0], "dilation_w": dilation[1],
              "groups": groups}
    return case(name, {**data, "upstream": upstream}, {"y": y}, grads, params)


def conv_cases():
    return [
        conv_case("conv_basic", (2, 3, 6, 6), (4, 3, 3, 3), True, padding=(1, 1)),
        conv_case("conv_stride2", (2, 3, 7, 7), (4, 3, 3, 3), False, stride=(2, 2),
                  padding=(1, 1)),
        conv_case("conv_dilation", (1, 2, 8, 8), (3, 2, 3, 3), True, padding=(2, 2),
                  dilation=(2, 2)),
        conv_case("conv_groups", (2, 4, 5, 5), (6, 2, 3, 3), True, padding=(1, 1), groups=2),
        conv_case("conv_depthwise", (2, 4, 6, 6), (4, 1, 3, 3), False, stride=(2, 2),
                  padding=(1, 1), groups=4),
        conv_case("conv_nonsquare", (2, 3, 7, 6), (5, 3, 2, 3), True, stride=(2, 1),
                  padding=(1, 0), dilation=(1, 2)),
        conv_case("conv_1x1", (2, 8, 4, 4), (6, 8, 1, 1), False),
        conv_case("conv_c16_odd_batch", (3, 16, 4, 4), (16, 16, 2, 2), True, stride=(2, 2),
                  padding=(1, 1)),
    ]


# ---- pooling -----------------------------------------------------------------
def pool_case(name, kind, x_shape, kernel, stride, padding):
    data = {"x": rnd(*x_shape)}
    t = leaves(data)
    if kind == "max":
        y = F.max_pool2d(t["x"], kernel, stride, padding)
    else:
        y = F.avg_pool2d(t["x"], kernel, stride, padding, count_include_pad=True)
    upstream = rnd(*y.shape)
    grads = grads_of(y, upstream, t, ["x"])
    params = {"kind": kind, "kernel_h": kernel[0], "kernel_w": kernel[1], "stride_h": stride[0],
              "stride_w": stride[1], "pad_h": padding[0], "pad_w": padding[1]}
    return case(name, {**data, "upstream": upstream}, {"y": y}, grads, params)


def pool_cases():
    cases = [
        pool_case("max_pool_2x2", "max", (2, 3, 6, 6), (2, 2), (2, 2), (0, 0)),
        pool_case("max_pool_3x3_s2_p1", "max", (2, 2, 7, 7), (3, 3), (2, 2), (1, 1)),
        pool_case("max_pool_nonsquare", "max", (1, 2, 5, 6), (2, 3), (1, 2), (1, 1)),
        pool_case("max_pool_overlap", "max", (2, 2, 5, 5), (3, 3), (1, 1), (0, 0)),
        pool_case("avg_pool_2x2", "avg", (2, 3, 6, 6), (2, 2), (2, 2), (0, 0)),
        pool_case("avg_pool_3x3_s2_p1", "avg", (2, 2, 7, 7), (3, 3), (2, 2), (1, 1)),
        pool_case("avg_pool_nonsquare", "avg", (1, 2, 5, 6), (3, 2), (2, 1), (1, 0)),
    ]
    data = {"x": rnd(2, 3, 4, 5)}
    t = leaves(data)
    y = t["x"].mean(dim=(2, 3))
    upstream = rnd(*y.shape)
    cases.append(case("global_avg_pool", {**data, "upstream": upstream}, {"y": y},
                      grads_of(y, upstream, t, ["x"]), {"kind": "global_avg"}))
    return cases


# ---- batch norm --------------------------------------------------------------
def bn_case(name, x_shape, training, momentum=0.1, eps=1e-5):
    c = x_shape[1]
    data = {"x": rnd(*x_shape, scale=2.0) + 0.5, "gamma": 1.0 + rnd(c, scale=0.3),
            "beta": rnd(c, scale=0.3)}
    running_mean = rnd(c, scale=0.5)
    running_var = 1.0 + rnd(c, scale=0.2).abs()
    t = leaves(data)
    rm, rv = running_mean.clone(), running_var.clone()
    y = F.batch_norm(t["x"], rm, rv, t["gamma"], t["beta"], training=training, momentum=momentum,
                     eps=eps)
    upstream = rnd(*y.shape)
    grads = grads_of(y, upstream, t, list(data))
    inputs = {**data, "running_mean": running_mean, "running_var": running_var,
              "upstream": upstream}
    return case(name, inputs, {"y": y, "running_mean": rm, "running_var": rv}, grads,
                {"training": training, "momentum": momentum, "eps": eps})


def bn_cases():
    return [
        bn_case("bn_train_nchw", (4, 3, 5, 5), True),
        bn_case("bn_train_2d", (8, 5), True),
        bn_case("bn_train_momentum", (3, 4, 2, 3), True, momentum=0.3, eps=1e-3),
        bn_case("bn_eval_nchw", (3, 4, 3, 3), False),
        bn_case("bn_eval_2d", (6, 3), False, eps=1e-3),
    ]


# ---- attention ---------------------------------------------------------------
def attention_reference(q, k, v, allowed, scale):
    s = (q @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(~allowed, -1e30)
    m = s.max(dim=-1, keepdim=True).values.detach()
    e = torch.exp(s - m) * allowed
    denom = e.sum(dim=-1, keepdim=True)
    p = e / torch.where(denom > 0, denom, torch.ones_like(denom))
    return p @ v


def attention_case(name, b, h, tq, tk, d, mask_shape=None, causal=False, scale=None,
                   masked_rows=()):
    data = {"q": rnd(b, h, tq, d), "k": rnd(b, h, tk, d), "v": rnd(b, h, tk, d)}
    allowed = torch.ones(b, h, tq, tk, dtype=torch.bool)
    inputs = {}
    if mask_shape is not None:
        mask = torch.rand(*mask_shape) > 0.3
        for index in masked_rows:  # queries that may attend to nothing
            mask[index] = False
        inputs["mask"] = mask.to(torch.uint8)
        allowed = allowed & mask
    if causal:
        i = torch.arange(tq).unsqueeze(1)
        j = torch.arange(tk).unsqueeze(0)
        allowed = allowed & (j <= i + (tk - tq))
    t = leaves(data)
    s = scale if scale is not None else 1.0 / math.sqrt(d)
    y = attention_reference(t["q"], t["k"], t["v"], allowed, s)
    upstream = rnd(*y.shape)
    grads = grads_of(y, upstream, t, ["q", "k", "v"])
    params = {"causal": causal}
    if scale is not None:
        params["scale"] = scale
    return case(name, {**data, **inputs, "upstream": upstream}, {"y": y}, grads, params)


def attention_cases():
    return [
        attention_case("attn_plain", 2, 2, 5, 5, 4),
        attention_case("attn_padding_mask", 2, 2, 4, 6, 8, mask_shape=(2, 1, 1, 6)),
        attention_case("attn_causal", 2, 3, 5, 5, 4, causal=True),
        attention_case("attn_causal_decode", 2, 2, 2, 6, 4, causal=True),
        attention_case("attn_cross_mask_full_row", 2, 2, 3, 6, 4, mask_shape=(2, 2, 3, 6),
                       masked_rows=[(0, 1, 2), (1, 0, 0)]),
        attention_case("attn_scale", 1, 2, 4, 3, 5, scale=0.3),
        attention_case("attn_causal_and_mask", 2, 2, 6, 6, 4, mask_shape=(2, 1, 1, 6),
                       causal=True),
        attention_case("attn_long", 1, 1, 17, 19, 16, mask_shape=(1, 1, 17, 19)),
    ]


if __name__ == "__main__":
    write("ops_nn", conv_cases() + pool_cases() + bn_cases() + attention_cases())
