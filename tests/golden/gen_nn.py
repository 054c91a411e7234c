"""Golden values for rig's layers (rig::nn), forward and backward.

Each case holds the layer's parameters as inputs named by their rig parameter
names relative to the layer (the C++ test copies them into the layer's
ParameterStore), the data inputs ("x", "memory", "ids", "mask"), a fixed
random upstream gradient ("upstream"), the outputs, and the gradients of
sum(y * upstream) with respect to the data inputs and every parameter.

References are computed in float64. The multi-head attention reference is
written out by hand (separate query/key/value/output projections) and checked
here against torch.nn.MultiheadAttention; the pre-norm Transformer layers are
checked against torch.nn.TransformerEncoderLayer / TransformerDecoderLayer
(norm_first=True).

Run: /usr/bin/python3 tests/golden/gen_nn.py  (writes tests/golden/nn.json)
"""
import math

import torch
import torch.nn.functional as F

from golden_util import case, write

D = torch.float64
torch.manual_seed(2024)

DATA_INPUTS = {"x", "memory", "ids", "mask", "upstream"}
BUFFERS = {"running_mean", "running_var"}


def rnd(*shape, scale=1.0):
    return torch.randn(*shape, dtype=D) * scale


def linear_params(prefix, n_in, n_out, bias=True):
    bound = 1.0 / math.sqrt(n_in)
    p = {prefix + "weight": torch.empty(n_out, n_in, dtype=D).uniform_(-bound, bound)}
    if bias:
        p[prefix + "bias"] = torch.empty(n_out, dtype=D).uniform_(-bound, bound)
    return p


def norm_params(prefix, n):
    return {prefix + "weight": 1.0 + rnd(n, scale=0.2), prefix + "bias": rnd(n, scale=0.2)}


def attention_params(prefix, c):
    p = {}
    for proj in ("query", "key", "value", "output"):
        p.update(linear_params(f"{prefix}{proj}.", c, c))
    return p


def ffn_params(prefix, c, hidden):
    return {**linear_params(prefix + "inner.", c, hidden), **linear_params(prefix + "outer.", hidden, c)}


def make_case(name, inputs, fn, out_shape, params=None):
    """Runs fn on float64 leaf copies of `inputs`; the loss is sum(y * upstream)."""
    inputs = dict(inputs)
    inputs["upstream"] = rnd(*out_shape)
    leaves = {}
    for k, v in inputs.items():
        t = v.clone()
        if t.is_floating_point() and k not in ("upstream", "mask") and k not in BUFFERS:
            t.requires_grad_(True)
        leaves[k] = t
    outputs = fn(leaves)
    assert tuple(outputs["y"].shape) == tuple(out_shape), (name, outputs["y"].shape)
    (outputs["y"] * leaves["upstream"]).sum().backward()
    grads = {k: v.grad for k, v in leaves.items() if v.requires_grad}
    return case(name, inputs, {k: v.detach() for k, v in outputs.items()}, grads, params)


# ---- references -------------------------------------------------------------

ACTIVATIONS = {
    "none": lambda t: t,
    "relu": torch.relu,
    "gelu": F.gelu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
}


def linear(p, prefix, x, activation="none"):
    return ACTIVATIONS[activation](F.linear(x, p[prefix + "weight"], p.get(prefix + "bias")))


def layer_norm(p, prefix, x, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], p[prefix + "weight"], p[prefix + "bias"], eps)


def attention(p, prefix, xq, xkv, heads, mask=None, causal=False):
    """Multi-head attention as rig defines it (mask: 1 = may attend)."""
    q = linear(p, prefix + "query.", xq)
    k = linear(p, prefix + "key.", xkv)
    v = linear(p, prefix + "value.", xkv)
    b, tq, c = q.shape
    tk = k.shape[1]
    dh = c // heads

    def split(t):
        return t.reshape(b, t.shape[1], heads, dh).transpose(1, 2)

    q, k, v = split(q), split(k), split(v)
    scores = q @ k.transpose(-1, -2) / math.sqrt(dh)
    allowed = torch.ones(b, heads, tq, tk, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask.bool()
    if causal:
        i = torch.arange(tq)[:, None]
        j = torch.arange(tk)[None, :]
        allowed = allowed & (j <= i + (tk - tq))
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    context = (weights @ v).transpose(1, 2).reshape(b, tq, c)
    return linear(p, prefix + "output.", context)


def feed_forward(p, prefix, x, activation="relu"):
    return linear(p, prefix + "outer.", linear(p, prefix + "inner.", x, activation))


def encoder_layer(p, x, heads, mask):
    h = x + attention(p, "attention.", layer_norm(p, "attention_norm.", x),
                      layer_norm(p, "attention_norm.", x), heads, mask)
    return h + feed_forward(p, "ffn.", layer_norm(p, "ffn_norm.", h))


def decoder_layer(p, x, memory, heads, memory_mask):
    n = layer_norm(p, "self_attention_norm.", x)
    h = x + attention(p, "self_attention.", n, n, heads, causal=True)
    h = h + attention(p, "cross_attention.", layer_norm(p, "cross_attention_norm.", h), memory,
                      heads, memory_mask)
    return h + feed_forward(p, "ffn.", layer_norm(p, "ffn_norm.", h))


# ---- cross-checks against torch.nn ----------------------------------------------

def load_mha(m, p, prefix):
    names = ("query", "key", "value")
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.cat([p[f"{prefix}{n}.weight"] for n in names]))
        m.in_proj_bias.copy_(torch.cat([p[f"{prefix}{n}.bias"] for n in names]))
        m.out_proj.weight.copy_(p[prefix + "output.weight"])
        m.out_proj.bias.copy_(p[prefix + "output.bias"])


def load_norm(m, p, prefix):
    with torch.no_grad():
        m.weight.copy_(p[prefix + "weight"])
        m.bias.copy_(p[prefix + "bias"])


def load_ffn(layer, p, prefix):
    with torch.no_grad():
        for m, n in ((layer.linear1, "inner."), (layer.linear2, "outer.")):
            m.weight.copy_(p[prefix + n + "weight"])
            m.bias.copy_(p[prefix + n + "bias"])


def check_close(a, b, what):
    err = (a - b).abs().max().item()
    assert err < 1e-10, f"{what}: reference and torch.nn differ by {err}"


def check_mha(p, xq, xkv, heads, mask, causal):
    m = torch.nn.MultiheadAttention(xq.shape[-1], heads, batch_first=True, dtype=D)
    load_mha(m, p, "")
    attn_mask = None
    if causal:
        tq, tk = xq.shape[1], xkv.shape[1]
        attn_mask = torch.arange(tk)[None, :] > torch.arange(tq)[:, None] + (tk - tq)
    padding = None
    if mask is not None:  # [B, 1, 1, Tk] -> key_padding_mask [B, Tk], True = ignore
        padding = ~mask.bool().reshape(mask.shape[0], mask.shape[-1])
    y, _ = m(xq, xkv, xkv, key_padding_mask=padding, attn_mask=attn_mask, need_weights=False)
    check_close(attention(p, "", xq, xkv, heads, mask, causal), y, "multi-head attention")


def check_encoder(p, x, heads, mask, hidden):
    c = x.shape[-1]
    layer = torch.nn.TransformerEncoderLayer(c, heads, hidden, dropout=0.0, batch_first=True,
                                             norm_first=True, dtype=D)
    load_mha(layer.self_attn, p, "attention.")
    load_norm(layer.norm1, p, "attention_norm.")
    load_norm(layer.norm2, p, "ffn_norm.")
    load_ffn(layer, p, "ffn.")
    padding = ~mask.bool().reshape(mask.shape[0], mask.shape[-1])
    y = layer(x, src_key_padding_mask=padding)
    check_close(encoder_layer(p, x, heads, mask), y, "encoder layer")


def check_decoder(p, x, memory, heads, mask, hidden):
    c = x.shape[-1]
    layer = torch.nn.TransformerDecoderLayer(c, heads, hidden, dropout=0.0, batch_first=True,
                                             norm_first=True, dtype=D)
    load_mha(layer.self_attn, p, "self_attention.")
    load_mha(layer.multihead_attn, p, "cross_attention.")
    load_norm(layer.norm1, p, "self_attention_norm.")
    load_norm(layer.norm2, p, "cross_attention_norm.")
    load_norm(layer.norm3, p, "ffn_norm.")
    load_ffn(layer, p, "ffn.")
    t = x.shape[1]
    causal = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    padding = ~mask.bool().reshape(mask.shape[0], mask.shape[-1])
    y = layer(x, memory, tgt_mask=causal, memory_key_padding_mask=padding)
    check_close(decoder_layer(p, x, memory, heads, mask), y, "decoder layer")


# ---- cases ------------------------------------------------------------------------

def padding_mask(lengths, t):
    """[B, 1, 1, T] u8: 1 for the first lengths[b] positions."""
    return (torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]).to(torch.uint8)[:, None, None, :]


def main():
    cases = []

    # Linear, with each fused activation, and without bias.
    for act in ACTIVATIONS:
        p = linear_params("", 5, 4)
        cases.append(make_case(f"linear_{act}", {"x": rnd(2, 3, 5), **p},
                               lambda t, a=act: {"y": linear(t, "", t["x"], a)}, (2, 3, 4),
                               {"in": 5, "out": 4, "bias": True, "activation": act}))
    p = linear_params("", 5, 4, bias=False)
    cases.append(make_case("linear_no_bias", {"x": rnd(6, 5), **p},
                           lambda t: {"y": linear(t, "", t["x"])}, (6, 4),
                           {"in": 5, "out": 4, "bias": False, "activation": "none"}))

    # Embedding (repeated ids accumulate into one row).
    ids = torch.tensor([[0, 3, 6, 3], [2, 2, 5, 1]], dtype=torch.int64)
    cases.append(make_case("embedding", {"ids": ids, "weight": rnd(7, 3)},
                           lambda t: {"y": F.embedding(t["ids"], t["weight"])}, (2, 4, 3),
                           {"vocab": 7, "dim": 3}))

    # LayerNorm.
    cases.append(make_case("layer_norm", {"x": rnd(2, 3, 6, scale=2.0) + 0.5, **norm_params("", 6)},
                           lambda t: {"y": layer_norm(t, "", t["x"])}, (2, 3, 6),
                           {"dim": 6, "eps": 1e-5}))

    # Multi-head attention: self, cross, causal, key padding, causal + padding.
    c, heads = 8, 2
    mha_cases = [
        ("mha_self", 5, None, None, False),
        ("mha_cross", 4, 6, None, False),
        ("mha_causal", 5, None, None, True),
        ("mha_padding", 4, 6, [6, 3], False),
        ("mha_causal_padding", 5, None, [5, 3], True),
    ]
    for name, tq, tk, lengths, causal in mha_cases:
        p = attention_params("", c)
        inputs = {"x": rnd(2, tq, c), **p}
        if tk is not None:
            inputs["memory"] = rnd(2, tk, c)
        if lengths is not None:
            inputs["mask"] = padding_mask(lengths, tk or tq)

        def fn(t, causal=causal):
            memory = t.get("memory", t["x"])
            return {"y": attention(t, "", t["x"], memory, heads, t.get("mask"), causal)}

        with torch.no_grad():
            check_mha(p, inputs["x"], inputs.get("memory", inputs["x"]), heads,
                      inputs.get("mask"), causal)
        cases.append(make_case(name, inputs, fn, (2, tq, c),
                               {"model_dim": c, "heads": heads, "causal": causal,
                                "self": tk is None}))

    # FeedForward (dropout 0).
    for act in ("relu", "gelu"):
        p = ffn_params("", c, 16)
        cases.append(make_case(f"feed_forward_{act}", {"x": rnd(2, 3, c), **p},
                               lambda t, a=act: {"y": feed_forward(t, "", t["x"], a)}, (2, 3, c),
                               {"model_dim": c, "hidden": 16, "activation": act}))

    # Conv2d.
    w = rnd(4, 3, 3, 3, scale=0.3)
    cases.append(make_case("conv2d", {"x": rnd(2, 3, 5, 5), "weight": w, "bias": rnd(4, scale=0.1)},
                           lambda t: {"y": F.conv2d(t["x"], t["weight"], t["bias"], padding=1)},
                           (2, 4, 5, 5),
                           {"in": 3, "out": 4, "kernel": 3, "stride": 1, "pad": 1, "groups": 1,
                            "bias": True}))
    w = rnd(6, 2, 3, 3, scale=0.3)
    cases.append(make_case("conv2d_stride2_groups", {"x": rnd(1, 4, 7, 7), "weight": w},
                           lambda t: {"y": F.conv2d(t["x"], t["weight"], stride=2, padding=1,
                                                    groups=2)},
                           (1, 6, 4, 4),
                           {"in": 4, "out": 6, "kernel": 3, "stride": 2, "pad": 1, "groups": 2,
                            "bias": False}))

    # BatchNorm2d, training (batch statistics, running stats updated) and eval.
    for training in (True, False):
        inputs = {"x": rnd(4, 3, 3, 3, scale=2.0) + 1.0, **norm_params("", 3),
                  "running_mean": rnd(3, scale=0.5), "running_var": 0.5 + torch.rand(3, dtype=D)}

        def fn(t, training=training):
            y = F.batch_norm(t["x"], t["running_mean"], t["running_var"], t["weight"], t["bias"],
                             training=training, momentum=0.1, eps=1e-5)
            return {"y": y, "running_mean": t["running_mean"], "running_var": t["running_var"]}

        cases.append(make_case("batch_norm2d_" + ("train" if training else "eval"), inputs, fn,
                               (4, 3, 3, 3),
                               {"channels": 3, "momentum": 0.1, "eps": 1e-5, "training": training}))

    # Pre-norm Transformer encoder layer (key padding) and decoder layer
    # (causal self-attention, cross-attention with memory padding).
    hidden = 16
    p = {**norm_params("attention_norm.", c), **attention_params("attention.", c),
         **norm_params("ffn_norm.", c), **ffn_params("ffn.", c, hidden)}
    x, mask = rnd(2, 5, c), padding_mask([5, 3], 5)
    with torch.no_grad():
        check_encoder(p, x, heads, mask, hidden)
    cases.append(make_case("encoder_layer", {"x": x, "mask": mask, **p},
                           lambda t: {"y": encoder_layer(t, t["x"], heads, t["mask"])}, (2, 5, c),
                           {"model_dim": c, "heads": heads, "hidden": hidden}))
    p = {**norm_params("self_attention_norm.", c), **attention_params("self_attention.", c),
         **norm_params("cross_attention_norm.", c), **attention_params("cross_attention.", c),
         **norm_params("ffn_norm.", c), **ffn_params("ffn.", c, hidden)}
    x, memory, mask = rnd(2, 4, c), rnd(2, 5, c), padding_mask([5, 2], 5)
    with torch.no_grad():
        check_decoder(p, x, memory, heads, mask, hidden)
    cases.append(make_case("decoder_layer", {"x": x, "memory": memory, "mask": mask, **p},
                           lambda t: {"y": decoder_layer(t, t["x"], t["memory"], heads, t["mask"])},
                           (2, 4, c), {"model_dim": c, "heads": heads, "hidden": hidden}))

    write("nn", cases)


if __name__ == "__main__":
    main()
