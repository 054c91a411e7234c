"""Checks that torch_transformer.py (the PyTorch side of transformer_train and
transformer_beam) computes what rig's transformer plugin computes: it loads the
weights of tests/golden/transformer.json (gen_transformer.py's float64
reference, which the plugin's own test checks it against) and compares the
logits, the label-smoothed loss, every parameter's gradient and the beam
search decodes (beam 2 and 4, here with incremental decoding and caches).

Run: .venv/bin/python tools/bench/check_torch_transformer.py  (exit 1 on a mismatch)
"""
import json
import os
import sys

import torch

import torch_transformer as tt

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "..", "tests", "golden", "transformer.json")

# torch_transformer's module names -> rig's, per layer (one encoder and one decoder layer).
LAYER_NAMES = {
    "attention_norm": "self_attention.layer_norm", "self_norm": "self_attention.layer_norm",
    "encdec_norm": "encdec_attention.layer_norm", "ffn_norm": "ffn.layer_norm",
    "ffn.filter_layer": "ffn.filter_layer", "ffn.output_layer": "ffn.output_layer",
    "attention.out": "self_attention.attention.output",
    "self_attention.out": "self_attention.attention.output",
    "encdec_attention.out": "encdec_attention.attention.output"}
FUSED = {"attention.qkv": ("self_attention", ("query", "key", "value")),
         "self_attention.qkv": ("self_attention", ("query", "key", "value")),
         "encdec_attention.q": ("encdec_attention", ("query",)),
         "encdec_attention.kv": ("encdec_attention", ("key", "value"))}


def tensor(t):
    dtype = torch.int64 if t["dtype"] == "i64" else torch.float64
    return torch.tensor(t["data"], dtype=dtype).reshape(t["shape"])


def rig_names(name):
    """The rig parameters that torch_transformer's parameter `name` holds, stacked along dim 0."""
    top = {"embedding": "embedding_and_softmax.weights",
           "encoder_norm.weight": "encoder.output_normalization.weight",
           "encoder_norm.bias": "encoder.output_normalization.bias",
           "decoder_norm.weight": "decoder.output_normalization.weight",
           "decoder_norm.bias": "decoder.output_normalization.bias"}
    if name in top:
        return [top[name]]
    stack, n, rest = name.split(".", 2)  # e.g. encoder_layers, 0, attention.qkv.weight
    module, leaf = rest.rsplit(".", 1)
    prefix = f"{stack.split('_')[0]}.layer_{n}."
    if module in FUSED:
        sublayer, parts = FUSED[module]
        return [f"{prefix}{sublayer}.attention.{p}.{leaf}" for p in parts]
    return [f"{prefix}{LAYER_NAMES[module]}.{leaf}"]


def load(case):
    p = case["params"]
    model = tt.Transformer(p["vocab_size"], 16, 2, 32, 1, 0.0).double()
    w = {k[2:]: tensor(v) for k, v in case["inputs"].items() if k.startswith("w:")}
    model.load_state_dict({n: torch.cat([w[r] for r in rig_names(n)])
                           for n in model.state_dict()})
    model.eval()
    inputs = {k: tensor(v) for k, v in case["inputs"].items() if not k.startswith("w:")}
    return model, inputs


def main():
    cases = {c["name"]: c for c in json.load(open(GOLDEN))["cases"]}
    failures = []

    def check(what, ours, theirs, tol=1e-6):
        ok = ours.shape == theirs.shape and torch.allclose(ours.double(), theirs.double(),
                                                           atol=tol, rtol=tol)
        print(f"{'ok' if ok else 'MISMATCH'}  {what}")
        if not ok:
            failures.append(what)

    case = cases["tiny"]
    model, x = load(case)
    memory, mask = model.encode(x["source_ids"], x["source_lengths"])
    logits = model.decode(x["target_ids"], memory, mask)
    weights = (torch.arange(logits.size(1))[None, :] < x["target_lengths"][:, None]).double()
    loss = tt.smoothed_cross_entropy(logits, x["target_ids"], weights, 0.1)
    loss.backward()
    check("logits", logits, tensor(case["outputs"]["logits"]))
    check("loss", loss, tensor(case["outputs"]["loss"]))
    golden = {k: tensor(v) for k, v in case["grads"].items()}
    checked = 0
    for name, param in model.named_parameters():
        rig = rig_names(name)
        for part, grad in zip(rig, param.grad.chunk(len(rig))):
            check(f"gradient of {part}", grad, golden[part])
            checked += 1
    if checked != len(golden):
        failures.append(f"{checked} gradients checked, the golden case has {len(golden)}")

    case = cases["tiny_trained_greedy"]
    model, x = load(case)
    max_length = x["source_ids"].size(1) + case["params"]["extra_decode_length"]
    with torch.no_grad():
        for beam in (2, 4):
            memory, mask = model.encode(x["source_ids"], x["source_lengths"])
            decoding = tt.Decoding(model, memory, mask, beam)
            out, _ = tt.beam_search(decoding, memory.size(0), beam, 0.6, max_length,
                                    case["params"]["vocab_size"])
            check(f"beam search, beam {beam}", out, tensor(case["outputs"][f"beam{beam}"]), 0)
    print("FAILED: " + ", ".join(failures) if failures else "all match")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
