"""The PyTorch side of the transformer_train and transformer_beam workloads
(tools/bench/run-cpu-bench; rig's side is bench_transformer.cpp).

The same architecture as rig's `transformer` plugin (OpenSeq2Seq's
Transformer, plugins/models/transformer/network.hpp), written plainly with
torch.nn and F.scaled_dot_product_attention:
  - one embedding [V, d] shared by source, target and the softmax (logits =
    x @ E^T), looked up rows scaled by sqrt(d), PAD rows zeroed, plus
    sinusoidal positions (first half sin, second half cos, OpenSeq2Seq's
    get_position_encoding) and dropout;
  - pre-norm layers: x + dropout(sublayer(LayerNorm(x))), a final LayerNorm
    per stack (eps 1e-6); attention without biases (the self-attention's
    q/k/v projections as one GEMM, the cross-attention's k/v as one: the
    same weights as rig's four d x d matrices); dropout on the attention
    weights; FFN relu(x W1 + b1) -> dropout -> W2 + b2, its output zeroed at
    source padding in the encoder (OpenSeq2Seq's remove_padding);
  - decoder input = the target shifted right, a zero vector first (the PAD
    id's zeroed embedding), causal self-attention;
  - OpenSeq2Seq's PaddedCrossEntropyLossWithSmoothing, exactly: confidence
    1 - s on the label, s / (V - 1) elsewhere, minus the soft targets'
    entropy, averaged over real target tokens;
  - beam search: OpenSeq2Seq's SequenceBeamSearch (as rig's beam_search.cpp),
    batched, with incremental decoding: self-attention keys/values appended
    per step, encoder-decoder keys/values projected once per source sentence.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

PAD, EOS = 0, 1
INF = 32768.0  # beam_search.cpp's kInf


def split_heads(x, heads):  # [B, T, d] -> [B, h, T, d/h]
    b, t, d = x.shape
    return x.view(b, t, heads, d // heads).transpose(1, 2)


def merge_heads(x):  # [B, h, T, k] -> [B, T, h k]
    b, h, t, k = x.shape
    return x.transpose(1, 2).reshape(b, t, h * k)


class Attention(nn.Module):
    def __init__(self, d, heads, dropout, self_attention):
        super().__init__()
        self.heads, self.dropout, self.self_attention = heads, dropout, self_attention
        if self_attention:
            self.qkv = nn.Linear(d, 3 * d, bias=False)
        else:
            self.q = nn.Linear(d, d, bias=False)
            self.kv = nn.Linear(d, 2 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)

    def project_memory(self, memory):  # cross-attention keys and values, split into heads
        return [split_heads(t, self.heads) for t in self.kv(memory).chunk(2, -1)]

    def forward(self, x, memory=None, mask=None, causal=False, cache=None, memory_kv=None):
        if self.self_attention:
            q, k, v = (split_heads(t, self.heads) for t in self.qkv(x).chunk(3, -1))
            if cache is not None:  # incremental decoding: append this step's keys/values
                if cache:
                    k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
                cache[:] = [k, v]
        else:
            q = split_heads(self.q(x), self.heads)
            k, v = memory_kv if memory_kv is not None else self.project_memory(memory)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.out(merge_heads(y))


class FeedForward(nn.Module):
    def __init__(self, d, filter_size, dropout):
        super().__init__()
        self.filter_layer = nn.Linear(d, filter_size)
        self.output_layer = nn.Linear(filter_size, d)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.output_layer(self.dropout(torch.relu(self.filter_layer(x))))


def layer_norm(d):
    return nn.LayerNorm(d, eps=1e-6)


class EncoderLayer(nn.Module):
    def __init__(self, d, heads, filter_size, dropout):
        super().__init__()
        self.attention_norm, self.attention = layer_norm(d), Attention(d, heads, dropout, True)
        self.ffn_norm, self.ffn = layer_norm(d), FeedForward(d, filter_size, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask, ffn_mask):
        h = x + self.dropout(self.attention(self.attention_norm(x), mask=mask))
        return h + self.dropout(self.ffn(self.ffn_norm(h)) * ffn_mask)


class DecoderLayer(nn.Module):
    def __init__(self, d, heads, filter_size, dropout):
        super().__init__()
        self.self_norm, self.self_attention = layer_norm(d), Attention(d, heads, dropout, True)
        self.encdec_norm = layer_norm(d)
        self.encdec_attention = Attention(d, heads, dropout, False)
        self.ffn_norm, self.ffn = layer_norm(d), FeedForward(d, filter_size, dropout)
        self.dropout = nn.Dropout(dropout)

    # Teacher forcing: x [B, T, d]; decoding one step: x [N, 1, d] with the caches.
    def forward(self, x, memory, mask, self_cache=None, memory_kv=None):
        h = x + self.dropout(self.self_attention(self.self_norm(x), causal=self_cache is None,
                                                 cache=self_cache))
        h = h + self.dropout(self.encdec_attention(self.encdec_norm(h), memory, mask,
                                                   memory_kv=memory_kv))
        return h + self.dropout(self.ffn(self.ffn_norm(h)))


def position_encoding(length, d):
    timescales = d // 2
    increment = math.log(1.0e4) / max(timescales - 1, 1)
    inv = torch.exp(torch.arange(timescales, dtype=torch.float32) * -increment)
    t = torch.arange(length, dtype=torch.float32)[:, None] * inv[None, :]
    return torch.cat([torch.sin(t), torch.cos(t)], 1)


class Transformer(nn.Module):
    def __init__(self, vocab, d, heads, filter_size, layers, dropout, max_length=256):
        super().__init__()
        self.d = d
        self.embedding = nn.Parameter(torch.randn(vocab, d) * d ** -0.5)
        self.encoder_layers = nn.ModuleList(
            EncoderLayer(d, heads, filter_size, dropout) for _ in range(layers))
        self.encoder_norm = layer_norm(d)
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(d, heads, filter_size, dropout) for _ in range(layers))
        self.decoder_norm = layer_norm(d)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("positions", position_encoding(max_length, d), persistent=False)
        for m in self.modules():  # tf.layers.Dense's glorot uniform, zero biases
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def embed(self, ids):
        return F.embedding(ids, self.embedding) * (math.sqrt(self.d) * (ids != PAD)[..., None])

    # -> memory [B, S, d] and the key padding mask [B, 1, 1, S] (True at real tokens).
    def encode(self, source, source_lengths):
        length = source.size(1)
        real = torch.arange(length, device=source.device)[None, :] < source_lengths[:, None]
        mask, ffn_mask = real[:, None, None, :], real[:, :, None].float()
        x = self.dropout(self.embed(source) + self.positions[:length])
        for layer in self.encoder_layers:
            x = layer(x, mask, ffn_mask)
        return self.encoder_norm(x), mask

    def decode(self, target, memory, mask):  # teacher-forced logits [B, T, V]
        b, length = target.shape
        embedded = self.embed(target[:, :-1])
        x = torch.cat([embedded.new_zeros(b, 1, self.d), embedded], 1)
        x = self.dropout(x + self.positions[:length])
        for layer in self.decoder_layers:
            x = layer(x, memory, mask)
        return F.linear(self.decoder_norm(x), self.embedding)


def smoothed_cross_entropy(logits, target, weights, smoothing):
    """OpenSeq2Seq's PaddedCrossEntropyLossWithSmoothing (rig's padded_cross_entropy)."""
    vocab = logits.size(-1)
    confidence, low = 1.0 - smoothing, smoothing / (vocab - 1)
    constant = -(confidence * math.log(confidence) + (vocab - 1) * low * math.log(low + 1e-20))
    log_probs = F.log_softmax(logits, -1)
    # -sum_v q_v log p_v with q = low everywhere, confidence at the label.
    xent = (-(confidence - low) * log_probs.gather(-1, target[..., None]).squeeze(-1)
            - low * log_probs.sum(-1))
    return ((xent - constant) * weights).sum() / weights.sum()


class Decoding:
    """Incremental decoding of N = B x beam hypotheses (hypothesis n decodes source n // beam)."""

    def __init__(self, model, memory, mask, beam):
        self.model, self.steps = model, 0
        rows = torch.arange(memory.size(0)).repeat_interleave(beam)
        self.mask = mask.index_select(0, rows)
        self.memory_kv = [[t.index_select(0, rows) for t in layer.encdec_attention.project_memory(
            memory)] for layer in model.decoder_layers]  # projected once per source sentence
        self.self_caches = [[] for _ in model.decoder_layers]

    def step(self, ids):  # ids [N] -> logits [N, V]
        m = self.model
        x = m.embed(ids[:, None]) + m.positions[self.steps]
        for layer, cache, kv in zip(m.decoder_layers, self.self_caches, self.memory_kv):
            x = layer(x, None, self.mask, self_cache=cache, memory_kv=kv)
        self.steps += 1
        return F.linear(m.decoder_norm(x), m.embedding)[:, 0]

    def reorder(self, index):
        for cache in self.self_caches:
            cache[:] = [t.index_select(0, index) for t in cache]


def length_penalty(alpha, length):
    return ((5.0 + length) / 6.0) ** alpha


def gather_beams(x, index):  # x [B, K, ...], index [B, k] -> [B, k, ...]
    return x[torch.arange(x.size(0))[:, None], index]


def beam_search(decoding, batch, beam, alpha, max_length, vocab):
    """OpenSeq2Seq's SequenceBeamSearch, batched (rig: beam_search.cpp). Returns
    the best hypothesis of each sentence as i64 [B, L], PAD after its EOS."""
    alive_seq = torch.full((batch, beam, 1), PAD)
    alive_log_probs = torch.full((batch, beam), -math.inf)
    alive_log_probs[:, 0] = 0.0
    finished_seq = alive_seq.clone()
    finished_scores = torch.full((batch, beam), -INF)
    finished_flags = torch.zeros(batch, beam, dtype=torch.bool)
    max_norm = length_penalty(alpha, max_length)
    offsets = (torch.arange(batch) * beam)[:, None]
    i = 0
    while i < max_length:
        # _continue_search: can some sentence's best alive hypothesis still win?
        lowest_finished = (finished_scores * finished_flags).min(1).values
        lowest_finished += (~finished_flags.any(1)) * -INF
        if bool((lowest_finished > alive_log_probs[:, 0] / max_norm).all()):
            break
        # _grow_alive_seq: the 2 x beam best extensions.
        logits = decoding.step(alive_seq[:, :, -1].reshape(-1))
        log_probs = F.log_softmax(logits, -1).view(batch, beam, vocab)
        log_probs = log_probs + alive_log_probs[:, :, None]
        top_log_probs, top = log_probs.view(batch, beam * vocab).topk(2 * beam, 1)
        top_beam, top_ids = top // vocab, top % vocab
        top_seq = torch.cat([gather_beams(alive_seq, top_beam), top_ids[:, :, None]], 2)
        ends = top_ids == EOS
        # _get_new_alive_state: the best `beam` that did not just end.
        alive_scores = top_log_probs + ends * -INF
        alive_log_probs, alive = alive_scores.topk(beam, 1)
        alive_seq = gather_beams(top_seq, alive)
        decoding.reorder((offsets + gather_beams(top_beam, alive)).view(-1))
        # _get_new_finished_state: the old finished (one more PAD) and the new ones.
        all_seq = torch.cat([F.pad(finished_seq, (0, 1), value=PAD), top_seq], 1)
        all_scores = torch.cat([
            finished_scores,
            top_log_probs / length_penalty(alpha, i + 1) + (~ends) * -INF], 1)
        all_flags = torch.cat([finished_flags, ends], 1)
        finished_scores, finished = all_scores.topk(beam, 1)
        finished_seq = gather_beams(all_seq, finished)
        finished_flags = gather_beams(all_flags, finished)
        i += 1
    # The best finished hypothesis, else the best alive one, without the initial PAD;
    # a finished one ends at its first EOS (PAD after it).
    any_finished = finished_flags.any(1)
    best = torch.where(any_finished[:, None], finished_seq[:, 0], alive_seq[:, 0])[:, 1:]
    eos = best == EOS
    lengths = torch.where(any_finished, eos.int().argmax(1) + 1, best.size(1))
    best = best.masked_fill(torch.arange(best.size(1))[None, :] >= lengths[:, None], PAD)
    return best[:, :int(lengths.max())], i
