"""Golden values for the `transformer` model plugin (plugins/models/transformer).

OpenSeq2Seq's Transformer (TransformerEncoder / TransformerDecoder, the MLPerf
transformer it is based on) written out in plain torch, float64, with rig's
parameter names:

  * a shared [V, d] embedding (embedding_and_softmax.weights), scaled by
    sqrt(d), PAD rows zeroed, plus OpenSeq2Seq's get_position_encoding;
  * pre-norm layers (LayerNorm eps 1e-6 -> sublayer -> residual), attention
    projections without bias, ReLU feed-forward with biases, final LayerNorms;
  * the decoder input shifted right by one (a zero vector first); logits are
    the decoder output times the embedding, transposed;
  * PaddedCrossEntropyLossWithSmoothing: target 1 - s on the label and
    s / (V - 1) elsewhere, minus that distribution's entropy, averaged over the
    real target tokens;
  * greedy decoding (each step recomputes the whole prefix, no caches).

The tiny case: d = 16, 2 heads, filter 32, one encoder and one decoder layer,
vocabulary 24, batch 2 with source lengths 5 / 7 (width 8) and target lengths
7 / 4 (width 7), label smoothing 0.1, no dropout. Every weight is stored in
the case (inputs "w:<name>"); the test loads them by name, runs the plugin in
train mode and compares the loss, the logits (through the loss), every
parameter gradient, and the greedy decode. A second case holds weights trained
for 300 Adam steps to reverse short sequences (random weights decode one token
over and over) and the greedy and beam search (beam 2 and 4, alpha 0.6)
decodes of three sources under them; the beam search is OpenSeq2Seq's,
transcribed to torch, decoding the whole prefix at every step.

Run: /work/main/.venv/bin/python tests/golden/gen_transformer.py  (writes tests/golden/transformer.json)
"""
import math

import torch

from golden_util import case, write

D = torch.float64
torch.manual_seed(11)

d, H, F, V = 16, 2, 32, 24
PAD, EOS = 0, 1
EPS = 1e-6
SMOOTHING = 0.1
EXTRA = 3


def make_weights(enc_layers=1, dec_layers=1):
    w = {"embedding_and_softmax.weights": torch.randn(V, d, dtype=D) * d ** -0.5}

    def norm(name):
        w[name + ".weight"] = 1.0 + 0.1 * torch.randn(d, dtype=D)
        w[name + ".bias"] = 0.1 * torch.randn(d, dtype=D)

    def attention(name):
        for p in ("query", "key", "value", "output"):
            w[f"{name}.{p}.weight"] = torch.randn(d, d, dtype=D) / math.sqrt(d)

    def ffn(name):
        w[name + ".filter_layer.weight"] = torch.randn(F, d, dtype=D) / math.sqrt(d)
        w[name + ".filter_layer.bias"] = 0.1 * torch.randn(F, dtype=D)
        w[name + ".output_layer.weight"] = torch.randn(d, F, dtype=D) / math.sqrt(F)
        w[name + ".output_layer.bias"] = 0.1 * torch.randn(d, dtype=D)

    for n in range(enc_layers):
        p = f"encoder.layer_{n}"
        norm(p + ".self_attention.layer_norm")
        attention(p + ".self_attention.attention")
        norm(p + ".ffn.layer_norm")
        ffn(p + ".ffn")
    norm("encoder.output_normalization")
    for n in range(dec_layers):
        p = f"decoder.layer_{n}"
        norm(p + ".self_attention.layer_norm")
        attention(p + ".self_attention.attention")
        norm(p + ".encdec_attention.layer_norm")
        attention(p + ".encdec_attention.attention")
        norm(p + ".ffn.layer_norm")
        ffn(p + ".ffn")
    norm("decoder.output_normalization")
    return w


def position_encoding(length):
    # utils.get_position_encoding, in float32 as TensorFlow, then widened.
    position = torch.arange(length, dtype=torch.float32)
    n = d // 2
    increment = math.log(1.0e4 / 1.0) / (n - 1)
    inv = torch.exp(torch.arange(n, dtype=torch.float32) * -increment)
    t = position[:, None] * inv[None, :]
    return torch.cat([torch.sin(t), torch.cos(t)], dim=1).to(D)


def layer_norm(w, name, x):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + EPS) * w[name + ".weight"] + w[name + ".bias"]


def attention(w, name, x, memory, mask):
    """mask: bool broadcastable to [B, H, Tq, Tk], True = may attend."""
    B, Tq, _ = x.shape
    Tk = memory.shape[1]
    dh = d // H

    def heads(t, T):
        return t.view(B, T, H, dh).transpose(1, 2)

    q = heads(x @ w[name + ".query.weight"].T, Tq) * dh ** -0.5
    k = heads(memory @ w[name + ".key.weight"].T, Tk)
    v = heads(memory @ w[name + ".value.weight"].T, Tk)
    logits = (q @ k.transpose(-1, -2)).masked_fill(~mask, -1e9)
    context = torch.softmax(logits, -1) @ v
    return context.transpose(1, 2).reshape(B, Tq, d) @ w[name + ".output.weight"].T


def ffn(w, name, x):
    h = torch.relu(x @ w[name + ".filter_layer.weight"].T + w[name + ".filter_layer.bias"])
    return h @ w[name + ".output_layer.weight"].T + w[name + ".output_layer.bias"]


def embed(w, ids):
    e = w["embedding_and_softmax.weights"][ids] * d ** 0.5
    return e * (ids != PAD).to(D)[..., None]


def encode(w, src, src_len, layers=1, remove_padding=True):
    B, S = src.shape
    real = torch.arange(S)[None, :] < src_len[:, None]  # [B, S]
    key_mask = real[:, None, None, :]
    x = embed(w, src) + position_encoding(S)
    for n in range(layers):
        p = f"encoder.layer_{n}"
        y = layer_norm(w, p + ".self_attention.layer_norm", x)
        x = x + attention(w, p + ".self_attention.attention", y, y, key_mask)
        y = ffn(w, p + ".ffn", layer_norm(w, p + ".ffn.layer_norm", x))
        if remove_padding:  # OpenSeq2Seq's PadRemover leaves zeros at padding
            y = y * real[..., None].to(D)
        x = x + y
    return layer_norm(w, "encoder.output_normalization", x), key_mask


def decode(w, tgt, encoded, key_mask, layers=1):
    B, T = tgt.shape
    x = torch.cat([torch.zeros(B, 1, d, dtype=D), embed(w, tgt)[:, :-1]], dim=1)
    x = x + position_encoding(T)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))[None, None]
    for n in range(layers):
        p = f"decoder.layer_{n}"
        y = layer_norm(w, p + ".self_attention.layer_norm", x)
        x = x + attention(w, p + ".self_attention.attention", y, y, causal)
        y = layer_norm(w, p + ".encdec_attention.layer_norm", x)
        x = x + attention(w, p + ".encdec_attention.attention", y, encoded, key_mask)
        x = x + ffn(w, p + ".ffn", layer_norm(w, p + ".ffn.layer_norm", x))
    x = layer_norm(w, "decoder.output_normalization", x)
    return x @ w["embedding_and_softmax.weights"].T


def padded_cross_entropy(logits, labels, weights, s):
    vocab = logits.shape[-1]
    confidence = 1.0 - s
    low = s / (vocab - 1)
    soft = torch.full_like(logits, low)
    soft.scatter_(-1, labels[..., None], confidence)
    xent = -(soft * torch.log_softmax(logits, -1)).sum(-1)
    normalizing = -(confidence * math.log(confidence) + (vocab - 1) * low * math.log(low + 1e-20))
    xent = xent - normalizing
    return (xent * weights).sum() / weights.sum()


def greedy(w, src, src_len, max_length):
    encoded, key_mask = encode(w, src, src_len)
    B = src.shape[0]
    out = torch.full((B, 0), PAD, dtype=torch.int64)
    done = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_length):
        if bool(done.all()):
            break
        # Teacher-force what was decoded so far plus a dummy last token.
        tokens = torch.cat([out, torch.full((B, 1), PAD, dtype=torch.int64)], dim=1)
        logits = decode(w, tokens, encoded, key_mask)[:, -1]
        best = logits.argmax(-1)
        best = torch.where(done, torch.full_like(best, PAD), best)
        out = torch.cat([out, best[:, None]], dim=1)
        done = done | (best == EOS)
    return out


def beam_search(w, src, src_len, beam, alpha, max_length):
    """OpenSeq2Seq's SequenceBeamSearch (parts/transformer/beam_search.py),
    transcribed to torch; each step decodes the whole prefix (no caches).
    Returns each row's best sequence, cut after its EOS, PAD-padded."""
    INF = 32768.0
    encoded, key_mask = encode(w, src, src_len)
    B = src.shape[0]
    encoded = encoded.repeat_interleave(beam, 0)
    key_mask = key_mask.repeat_interleave(beam, 0)

    def norm(length):
        return ((5.0 + length) / 6.0) ** alpha

    def top(values, k):  # ties: lower index first, as tf.nn.top_k
        return torch.sort(values, dim=1, descending=True, stable=True)[1][:, :k]

    def pick(t, index):  # t [B, n, ...], index [B, k] -> [B, k, ...]
        return torch.stack([t[b, index[b]] for b in range(B)])

    alive_seq = torch.full((B, beam, 1), PAD, dtype=torch.int64)
    alive_lp = torch.tensor([[0.0] + [-math.inf] * (beam - 1)], dtype=D).repeat(B, 1)
    fin_seq = torch.full((B, beam, 1), PAD, dtype=torch.int64)
    fin_scores = torch.full((B, beam), -INF, dtype=D)
    fin_flags = torch.zeros((B, beam), dtype=torch.bool)
    i = 0
    while i < max_length:
        best_alive = alive_lp[:, 0] / norm(max_length)
        lowest = (fin_scores * fin_flags.to(D)).min(1).values
        lowest = lowest + (~fin_flags.any(1)).to(D) * -INF
        if bool((lowest > best_alive).all()):
            break
        flat = alive_seq.reshape(B * beam, -1)
        inputs = torch.cat([flat[:, 1:], torch.full((B * beam, 1), PAD, dtype=torch.int64)], 1)
        logits = decode(w, inputs, encoded, key_mask)[:, -1]
        log_probs = torch.log_softmax(logits, -1).view(B, beam, V) + alive_lp[..., None]
        flat_lp = log_probs.reshape(B, beam * V)
        index = top(flat_lp, 2 * beam)
        topk_lp = torch.gather(flat_lp, 1, index)
        topk_seq = torch.cat([pick(alive_seq, index // V), (index % V)[..., None]], 2)
        ends = topk_seq[:, :, -1] == EOS
        alive_scores = topk_lp + ends.to(D) * -INF
        keep = top(alive_scores, beam)
        alive_seq, alive_lp = pick(topk_seq, keep), torch.gather(alive_scores, 1, keep)
        # The reordered alive beams carry their caches along in rig; here the
        # prefix is decoded again each step.
        fin_seq = torch.cat([fin_seq, torch.full((B, beam, 1), PAD, dtype=torch.int64)], 2)
        new_scores = topk_lp / norm(i + 1) + (~ends).to(D) * -INF
        all_seq = torch.cat([fin_seq, topk_seq], 1)
        all_scores = torch.cat([fin_scores, new_scores], 1)
        all_flags = torch.cat([fin_flags, ends], 1)
        keep = top(all_scores, beam)
        fin_seq, fin_scores = pick(all_seq, keep), torch.gather(all_scores, 1, keep)
        fin_flags = torch.gather(all_flags, 1, keep)
        i += 1
    rows = []
    for b in range(B):
        seq = (fin_seq if bool(fin_flags[b].any()) else alive_seq)[b, 0, 1:].tolist()
        if EOS in seq:
            seq = seq[: seq.index(EOS) + 1]
        rows.append(seq)
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows], dtype=torch.int64)


def batch_rows(rows, width):
    ids = torch.full((len(rows), width), PAD, dtype=torch.int64)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
    return ids, torch.tensor([len(r) for r in rows], dtype=torch.int64)


def tokens(n):
    return torch.randint(4, V, (n,)).tolist() + [EOS]


def trained_weights(steps=300):
    """Weights trained briefly on reversing sequences, so greedy decoding gives
    varied tokens and EOS (random weights repeat one token)."""
    w = make_weights()
    for t in w.values():
        t.requires_grad_(True)
    opt = torch.optim.Adam(list(w.values()), lr=0.01)
    for _ in range(steps):
        rows = [tokens(int(torch.randint(2, 6, ()))) for _ in range(16)]
        src, src_len = batch_rows(rows, 8)
        tgt, tgt_len = batch_rows([r[:-1][::-1] + [EOS] for r in rows], 8)
        encoded, key_mask = encode(w, src, src_len)
        logits = decode(w, tgt, encoded, key_mask)
        weights = (torch.arange(8)[None, :] < tgt_len[:, None]).to(D)
        loss = padded_cross_entropy(logits, tgt, weights, 0.0)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {k: v.detach() for k, v in w.items()}


def decode_case():
    w = trained_weights()
    # Sources on which beam search and greedy decoding disagree under these
    # weights (found by trying random ones), and one they agree on.
    src, src_len = batch_rows([[20, 18, 8, 6, 13, EOS], [23, 5, 16, EOS],
                               [22, 4, 4, 21, 12, EOS]], 8)
    with torch.no_grad():
        decoded = greedy(w, src, src_len, src.shape[1] + EXTRA)
    inputs = {"source_ids": src, "source_lengths": src_len}
    inputs.update({"w:" + k: v for k, v in w.items()})
    outputs = {"greedy": decoded}
    with torch.no_grad():
        for beam in (2, 4):
            outputs[f"beam{beam}"] = beam_search(w, src, src_len, beam, 0.6,
                                                 src.shape[1] + EXTRA)
    return case("tiny_trained_greedy", inputs, outputs,
                params={"vocab_size": V, "extra_decode_length": EXTRA})


def main():
    w = make_weights()
    src, src_len = batch_rows([tokens(4), tokens(6)], 8)
    tgt, tgt_len = batch_rows([tokens(6), tokens(3)], 7)
    for t in w.values():
        t.requires_grad_(True)
    encoded, key_mask = encode(w, src, src_len)
    logits = decode(w, tgt, encoded, key_mask)
    weights = (torch.arange(tgt.shape[1])[None, :] < tgt_len[:, None]).to(D)
    loss = padded_cross_entropy(logits, tgt, weights, SMOOTHING)
    loss.backward()
    correct = ((logits.argmax(-1) == tgt).to(D) * weights).sum()
    with torch.no_grad():
        decoded = greedy(w, src, src_len, src.shape[1] + EXTRA)
    inputs = {"source_ids": src, "source_lengths": src_len, "target_ids": tgt,
              "target_lengths": tgt_len}
    inputs.update({"w:" + k: v.detach() for k, v in w.items()})
    cases = [case("tiny", inputs,
                  {"loss": loss.detach(), "logits": logits.detach(), "greedy": decoded,
                   "correct_tokens": correct},
                  grads={k: v.grad for k, v in w.items()},
                  params={"hidden_size": d, "num_heads": H, "filter_size": F, "vocab_size": V,
                          "label_smoothing": SMOOTHING, "extra_decode_length": EXTRA}),
             decode_case()]
    write("transformer", cases)


if __name__ == "__main__":
    main()
