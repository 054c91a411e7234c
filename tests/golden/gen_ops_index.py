"""Golden values for the indexing and selection ops: concat, split, gather,
index_select, where, masked_fill, embedding (forward and backward), argmax
and topk. Gradients are of sum(output * upstream) with a fixed random upstream.

Run: /usr/bin/python3 tests/golden/gen_ops_index.py  (writes ops_index.json)
"""
import torch

from golden_util import case, write

torch.manual_seed(3)


def rand(*shape):
    return torch.randn(shape, dtype=torch.float64)


def leaf(t):
    return t.clone().requires_grad_(True)


def grads_of(outputs, upstreams, inputs):
    loss = sum((o * u).sum() for o, u in zip(outputs, upstreams))
    loss.backward()
    return {k: v.grad for k, v in inputs.items()}


cases = []

# ---- concat -------------------------------------------------------------------
for name, shapes, axis in [
    ("concat_axis0", [(2, 3), (1, 3), (3, 3)], 0),
    ("concat_axis1", [(2, 2, 3), (2, 1, 3), (2, 4, 3)], 1),
    ("concat_last", [(2, 3, 1), (2, 3, 2)], -1),
    ("concat_one", [(3, 2)], 1),
]:
    ins = {f"x{i}": leaf(rand(*s)) for i, s in enumerate(shapes)}
    out = torch.cat(list(ins.values()), axis)
    up = rand(*out.shape)
    grads = grads_of([out], [up], ins)
    cases.append(case(name, {**ins, "upstream": up}, {"out": out}, grads, {"axis": axis}))

# ---- split --------------------------------------------------------------------
# `used` lists the outputs that enter the loss; the others get no gradient.
for name, shape, sizes, axis, used in [
    ("split_axis1_all", (2, 6, 3), [2, 1, 3], 1, [0, 1, 2]),
    ("split_axis0_some", (5, 4), [2, 3], 0, [1]),
    ("split_last_gap", (3, 2, 7), [3, 0, 2, 2], -1, [0, 3]),
]:
    x = leaf(rand(*shape))
    outs = torch.split(x, sizes, axis)
    ups = {f"upstream{i}": rand(*outs[i].shape) for i in used}
    grads = grads_of([outs[i] for i in used], [ups[f"upstream{i}"] for i in used], {"x": x})
    cases.append(case(name, {"x": x, **ups}, {f"out{i}": o for i, o in enumerate(outs)}, grads,
                      {"sizes": sizes, "axis": axis, "used": used}))

# ---- gather -------------------------------------------------------------------
for name, shape, index_shape, axis in [
    ("gather_axis0", (4, 3), (6, 3), 0),
    ("gather_axis1_small", (3, 5, 4), (2, 7, 3), 1),
    ("gather_last", (2, 3, 6), (2, 3, 4), -1),
]:
    x = leaf(rand(*shape))
    index = torch.randint(0, shape[axis], index_shape, dtype=torch.int64)
    out = torch.gather(x, axis, index)
    up = rand(*out.shape)
    grads = grads_of([out], [up], {"x": x})
    cases.append(case(name, {"x": x, "index": index, "upstream": up}, {"out": out}, grads,
                      {"axis": axis}))

# ---- index_select ---------------------------------------------------------------
for name, shape, index, axis in [
    ("index_select_axis0_repeats", (5, 3), [4, 0, 4, 2, 4], 0),
    ("index_select_axis1", (2, 4, 3), [3, 1, 1], 1),
    ("index_select_last", (3, 5), [0, 4, 2, 0], -1),
]:
    x = leaf(rand(*shape))
    idx = torch.tensor(index, dtype=torch.int64)
    out = torch.index_select(x, axis, idx)
    up = rand(*out.shape)
    grads = grads_of([out], [up], {"x": x})
    cases.append(case(name, {"x": x, "index": idx, "upstream": up}, {"out": out}, grads,
                      {"axis": axis}))

# ---- where ------------------------------------------------------------------------
for name, cshape, ashape, bshape in [
    ("where_same", (3, 4), (3, 4), (3, 4)),
    ("where_broadcast", (2, 1, 4), (3, 4), (2, 3, 1)),
    ("where_scalar_b", (2, 3), (2, 3), ()),
]:
    cond = torch.rand(cshape) > 0.5
    a, b = leaf(rand(*ashape)), leaf(rand(*bshape))
    out = torch.where(cond, a, b)
    up = rand(*out.shape)
    grads = grads_of([out], [up], {"a": a, "b": b})
    cases.append(case(name, {"cond": cond, "a": a, "b": b, "upstream": up}, {"out": out}, grads))

# ---- masked_fill ---------------------------------------------------------------------
for name, xshape, mshape, value in [
    ("masked_fill_same", (3, 4), (3, 4), -2.5),
    ("masked_fill_broadcast", (2, 3, 4), (3, 1), -1e9),
]:
    x = leaf(rand(*xshape))
    mask = torch.rand(*mshape) > 0.5
    out = x.masked_fill(mask, value)
    up = rand(*out.shape)
    grads = grads_of([out], [up], {"x": x})
    cases.append(case(name, {"x": x, "mask": mask, "upstream": up}, {"out": out}, grads,
                      {"value": value}))

# ---- embedding --------------------------------------------------------------------
for name, vocab, dim, ids in [
    ("embedding_2d_ids", 10, 4, [[1, 7, 1], [9, 0, 1]]),
    ("embedding_1d_ids", 6, 5, [5, 5, 2, 0]),
]:
    w = leaf(rand(vocab, dim))
    idx = torch.tensor(ids, dtype=torch.int64)
    out = torch.nn.functional.embedding(idx, w)
    up = rand(*out.shape)
    grads = grads_of([out], [up], {"weight": w})
    cases.append(case(name, {"weight": w, "ids": idx, "upstream": up}, {"out": out}, grads))

# ---- argmax and topk (ties: first / lower index) -------------------------------------
ties = torch.randint(0, 4, (4, 40)).to(torch.float64)
cases.append(case("argmax_last_ties", {"x": ties}, {"out": torch.argmax(ties, -1)}, None,
                  {"axis": -1}))
cases.append(case("argmax_axis0_ties", {"x": ties}, {"out": torch.argmax(ties, 0)}, None,
                  {"axis": 0}))
x3 = rand(3, 5, 4)
cases.append(case("argmax_middle", {"x": x3}, {"out": torch.argmax(x3, 1)}, None, {"axis": 1}))
for name, x, k, axis in [
    ("topk_last_ties", torch.randint(0, 6, (5, 70)).to(torch.float64), 8, -1),
    ("topk_axis0", rand(9, 3), 4, 0),
    ("topk_full", torch.randint(0, 3, (2, 10)).to(torch.float64), 10, -1),
    ("topk_large_k", torch.randint(0, 50, (3, 300)).to(torch.float64), 100, -1),
]:
    # torch's CPU topk does not promise an order among ties; a stable sort does.
    order = torch.sort(x, dim=axis, descending=True, stable=True)
    values = order.values.narrow(axis, 0, k)
    indices = order.indices.narrow(axis, 0, k)
    check = torch.topk(x, k, axis)
    assert torch.equal(check.values, values)
    cases.append(case(name, {"x": x}, {"values": values, "indices": indices}, None,
                      {"k": k, "axis": axis}))

write("ops_index", cases)
