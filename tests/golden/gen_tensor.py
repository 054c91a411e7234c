"""Golden values for tensor views and casts (tests/unit/test_tensor_views.cpp,
test_tensor_dtype.cpp). Run: /usr/bin/python3 tests/golden/gen_tensor.py

View cases: params["ops"] is a chain of view ops applied to input "x"; the
output "y" is the result and grad "x" the gradient of sum(y * upstream).
Cast cases: input "x" (f32) and its values after rounding to f16 / bf16
(widened back to f32), and truncated to i64 where in range.
"""
import struct

import torch

from golden_util import case, write

torch.manual_seed(1234)


def apply(x, ops):
    for op in ops:
        name, args = op[0], op[1:]
        if name == "transpose":
            x = x.transpose(*args)
        elif name == "permute":
            x = x.permute(*args[0])
        elif name == "slice":
            axis, start, end, step = args
            index = [slice(None)] * x.dim()
            index[axis] = slice(start, end, step)
            x = x[tuple(index)]
        elif name == "expand":
            x = x.expand(*args[0])
        elif name == "reshape":
            x = x.reshape(*args[0])
        elif name == "unsqueeze":
            x = x.unsqueeze(args[0])
        elif name == "squeeze":
            x = x.squeeze(args[0])
        elif name == "flatten":
            x = x.flatten(*args)
        elif name == "contiguous":
            x = x.contiguous()
        else:
            raise ValueError(name)
    return x


def view_case(name, shape, ops):
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    y = apply(x, ops)
    upstream = torch.randn(*y.shape, dtype=torch.float64)
    (y * upstream).sum().backward()
    return case(name, {"x": x, "upstream": upstream}, {"y": y}, {"x": x.grad}, {"ops": ops})


cases = [
    view_case("view_transpose", [2, 3, 4], [["transpose", 0, 2]]),
    view_case("view_transpose_negative_axes", [2, 3, 4], [["transpose", -1, -2]]),
    view_case("view_permute", [2, 3, 4, 5], [["permute", [2, 0, 3, 1]]]),
    view_case("view_slice_step", [5, 7], [["slice", 1, 1, 6, 2]]),
    view_case("view_slice_negative", [5, 7], [["slice", 0, -4, -1, 1], ["slice", 1, -6, 7, 3]]),
    view_case("view_slice_clamped", [4, 3], [["slice", 0, 2, 100, 1]]),
    view_case("view_expand", [3, 1, 4], [["expand", [2, 3, 5, 4]]]),
    view_case("view_expand_keep", [1, 3, 1], [["expand", [4, -1, 2]]]),
    view_case("view_unsqueeze_squeeze", [3, 4], [["unsqueeze", 1], ["expand", [3, 2, 4]],
                                                  ["slice", 1, 1, 2, 1], ["squeeze", 1]]),
    view_case("view_reshape_of_transpose", [3, 4, 2], [["transpose", 0, 1], ["reshape", [8, 3]]]),
    view_case("view_reshape_merge", [2, 3, 4], [["reshape", [6, -1]], ["reshape", [2, 12]]]),
    view_case("view_flatten", [2, 3, 4, 5], [["permute", [0, 2, 1, 3]], ["flatten", 1, 2]]),
    view_case("view_chain", [4, 6, 5], [["permute", [2, 0, 1]], ["slice", 2, 1, 6, 2],
                                        ["reshape", [5, 12]], ["transpose", 0, 1],
                                        ["unsqueeze", 0], ["expand", [2, 12, 5]],
                                        ["contiguous"]]),
]


def f32(bits):
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def tricky_values():
    values = [0.0, -0.0, 1.0, -1.0, 0.1, 1.0 / 3.0, 65504.0, 65519.0, -65504.0,
              1e-5, 6.1e-5, 5.96e-8, 2.98e-8, 2.99e-8, 1e-8, 3.0e-8, -5e-8, 1e4, 12345.678,
              3.140625, 2049.0, 2051.0, 4097.0, 1e-40]
    # Midpoints between adjacent f16 values (ties), and one f32 ulp either side.
    for h in [0x0001, 0x0002, 0x03FF, 0x0400, 0x3C00, 0x3C01, 0x5640, 0x7BFE]:
        lo = torch.tensor([h], dtype=torch.int16).view(torch.float16).float().item()
        hi = torch.tensor([h + 1], dtype=torch.int16).view(torch.float16).float().item()
        mid = lo + (hi - lo) / 2
        values += [mid, -mid]
        bits = struct.unpack("<I", struct.pack("<f", mid))[0]
        values += [f32(bits - 1), f32(bits + 1)]
    # bf16 ties: low 16 bits exactly 0x8000.
    for top in [0x3F80, 0x3F81, 0x4049, 0xC2F7, 0x0080, 0x477F]:
        values += [f32((top << 16) | 0x8000), f32((top << 16) | 0x7FFF), f32((top << 16) | 0x8001)]
    values += torch.randn(64).mul(100).tolist()
    return torch.tensor(values, dtype=torch.float32)


x = tricky_values()
cases.append(case("cast_tricky", {"x": x},
                  {"f16": x.half().float(), "bf16": x.bfloat16().float()}))
small = torch.tensor([-2.7, -0.5, 0.5, 2.7, 300.0, -300.0, 60000.0, -65000.5, 0.0], dtype=torch.float32)
cases.append(case("cast_small_to_int", {"x": small},
                  {"f16": small.half().float(), "bf16": small.bfloat16().float(),
                   "i64": small.long()}))

write("tensor", cases)
