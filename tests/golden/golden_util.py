"""Writing golden values for rig's tests from PyTorch.

Each tests/golden/gen_<area>.py builds cases with `case(...)` and calls
`write("<area>", cases)`, producing tests/golden/<area>.json, which the C++
tests read (tests/support/golden.hpp) without needing torch. Run with Debian's
python3-torch (`/usr/bin/python3 tests/golden/gen_ops.py`) or any newer torch.
"""
import json
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))

_DTYPES = {
    torch.float32: "f32",
    torch.float64: "f32",  # goldens are computed in f64 where it helps, stored as f32 values
    torch.int64: "i64",
    torch.int32: "i32",
    torch.uint8: "u8",
    torch.bool: "u8",
}


def tensor(t):
    """A tensor as {"shape": [...], "dtype": "...", "data": [...]} (row-major)."""
    t = t.detach().cpu()
    dtype = _DTYPES[t.dtype]
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    data = t.reshape(-1).tolist()
    if dtype == "f32":
        data = [float(x) for x in data]
    return {"shape": list(t.shape), "dtype": dtype, "data": data}


def case(name, inputs, outputs, grads=None, params=None):
    """One golden case: named input tensors, output tensors, gradients of the
    named inputs (for the loss sum(output * upstream) unless the case says
    otherwise), and free-form scalar parameters."""
    return {
        "name": name,
        "inputs": {k: tensor(v) for k, v in inputs.items()},
        "outputs": {k: tensor(v) for k, v in outputs.items()},
        "grads": {k: tensor(v) for k, v in (grads or {}).items()},
        "params": params or {},
    }


def write(area, cases):
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    path = os.path.join(HERE, f"{area}.json")
    with open(path, "w") as f:
        json.dump({"generator": f"tests/golden/gen_{area}.py", "torch": torch.__version__,
                   "cases": cases}, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {len(cases)} cases to {path}")
