#!/usr/bin/env python3
"""Converts a seqgrad Transformer checkpoint into a CTranslate2 model directory, weight by weight,
so the engine users deploy on CPUs decodes the same computation as `seqgrad translate`:

- pre-norm or post-norm layers (model.norm_first), ReLU feed-forward, LayerNorm eps 1e-5 (torch's);
- token embeddings scaled by sqrt(E) plus seqgrad's position table written in: its sinusoid
  interleaves sine and cosine (nn/positional.h), where CTranslate2's default puts every sine first,
  or the learned table;
- the fused q/k/v projection of self-attention as is; cross-attention's split into the query
  projection and the fused key/value one;
- tied embeddings (model.tie_embeddings: one table for source, target and output) set three times;
- the source gets `<eos>` appended (add_source_eos) and decoding starts from `<bos>`, as seqgrad's.

Usage: ct2_convert.py CHECKPOINT OUT_DIR [--quantization int8|int8_float32|float32] [--force]
Needs the `ctranslate2` package (scripts/setup.sh --tests puts it into .venv).
"""
import argparse
import base64
import json
import math
import os
import shutil
import struct
import sys

import numpy as np



def read_checkpoint(path):
    """The tensors (numpy), the training config and both vocabularies' token lists."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    if meta.get("format") != "seqgrad.seq2seq":
        raise ValueError(f"{path}: not a seqgrad translator checkpoint (metadata format "
                         f"{meta.get('format')!r}, expected 'seqgrad.seq2seq')")
    data = raw[8 + n:]
    tensors = {}
    for name, e in header.items():
        if not name.startswith("model."):
            continue  # optimizer state
        if e["dtype"] != "F32":
            raise ValueError(f"{path}: {name} is {e['dtype']}; convert a float32 checkpoint "
                             "(CTranslate2 quantizes it itself with --quantization int8)")
        begin, end = e["data_offsets"]
        tensors[name[len("model."):]] = np.frombuffer(data[begin:end], dtype=np.float32).reshape(e["shape"]).copy()
    config = json.loads(meta["config"])
    return tensors, config, vocab_tokens(meta["src_vocab"]), vocab_tokens(meta["tgt_vocab"])


def vocab_tokens(text):
    """A vocabulary's tokens by id: a word vocabulary lists them, a SentencePiece one has its model."""
    v = json.loads(text)
    if "tokens" in v:
        return list(v["tokens"])
    if v.get("kind") == "sentencepiece":
        import sentencepiece  # the pieces by id, as seqgrad's SubwordModel numbers them
        sp = sentencepiece.SentencePieceProcessor(model_proto=base64.b64decode(v["model"]))
        return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    raise ValueError(f"a vocabulary of kind {v.get('kind')!r}: expected word tokens or a SentencePiece model")


def position_table(positions, d):
    """nn/positional.h's sinusoid: P[p, 2i] = sin(p / 10000^(2i/d)), P[p, 2i+1] = cos(the same)."""
    p = np.arange(positions, dtype=np.float64)[:, None]
    angle = p * np.exp(np.arange(0, d, 2, dtype=np.float64) * (-math.log(10000.0) / d))
    table = np.zeros((positions, d), dtype=np.float64)
    table[:, 0::2], table[:, 1::2] = np.sin(angle), np.cos(angle)
    return table.astype(np.float32)


def set_linear(spec, w, prefix, bias=True):
    spec.weight = w[prefix + ".weight"]
    if bias:
        spec.bias = w[prefix + ".bias"]


def set_norm(spec, w, prefix):
    spec.gamma, spec.beta = w[prefix + ".weight"], w[prefix + ".bias"]


def set_layer(layer, w, prefix, E, cross):
    """One encoder or decoder layer. seqgrad's (torch's) names: norm1 before self-attention, norm2
    before cross-attention (decoder) or the feed-forward (encoder), norm3 before the decoder's."""
    a = layer.self_attention
    set_norm(a.layer_norm, w, prefix + ".norm1")
    a.linear[0].weight, a.linear[0].bias = w[prefix + ".self_attn.in_proj_weight"], w[prefix + ".self_attn.in_proj_bias"]
    set_linear(a.linear[1], w, prefix + ".self_attn.out_proj")
    ffn_norm = prefix + ".norm2"
    if cross:
        c = layer.attention
        set_norm(c.layer_norm, w, prefix + ".norm2")
        qkv_w, qkv_b = w[prefix + ".multihead_attn.in_proj_weight"], w[prefix + ".multihead_attn.in_proj_bias"]
        c.linear[0].weight, c.linear[0].bias = qkv_w[:E], qkv_b[:E]
        c.linear[1].weight, c.linear[1].bias = qkv_w[E:], qkv_b[E:]
        set_linear(c.linear[2], w, prefix + ".multihead_attn.out_proj")
        ffn_norm = prefix + ".norm3"
    set_norm(layer.ffn.layer_norm, w, ffn_norm)
    set_linear(layer.ffn.linear_0, w, prefix + ".linear1")
    set_linear(layer.ffn.linear_1, w, prefix + ".linear2")


def build_spec(tensors, config, src_tokens, tgt_tokens, max_positions=1024):
    from ctranslate2.specs import transformer_spec
    m = config["model"]
    architecture = m.get("architecture", "gru")  # checkpoints older than the Transformer are GRUs
    if architecture != "transformer":
        raise ValueError(f"model.architecture is {architecture!r}: CTranslate2's TransformerSpec "
                         "takes seqgrad's Transformer translator only")
    E, L, norm_first = m["hidden_size"], m["num_layers"], m["norm_first"]
    spec = transformer_spec.TransformerSpec.from_config(L, m["heads"], pre_norm=norm_first)
    w = tensors
    if m["tie_embeddings"]:
        src_table = tgt_table = out_table = w["embedding.weight"]
    else:
        src_table, tgt_table, out_table = w["src_embedding.weight"], w["tgt_embedding.weight"], w["out.weight"]
    if m["positional"] == "sinusoidal":
        positions = position_table(max_positions, E)
    else:
        positions = w["positions.weight"]
    for side, table, prefix in ((spec.encoder, src_table, "encoder"), (spec.decoder, tgt_table, "decoder")):
        embeddings = side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings
        embeddings.weight = table
        side.scale_embeddings = True  # sqrt(E), as seqgrad's embed()
        side.position_encodings.encodings = positions
        if norm_first:  # a pre-norm stack ends in its own LayerNorm (a post-norm one has none)
            set_norm(side.layer_norm, w, prefix + ".norm")
        for i, layer in enumerate(side.layer):
            set_layer(layer, w, f"{prefix}.layers.{i}", E, cross=prefix == "decoder")
    spec.decoder.projection.weight = out_table
    spec.decoder.projection.bias = np.zeros(out_table.shape[0], dtype=np.float32)
    spec.register_source_vocabulary(src_tokens)
    spec.register_target_vocabulary(tgt_tokens)
    # ids 1, 2 and 3 are <bos>, <eos> and <unk> in both vocabularies (a SentencePiece model names
    # them its own way)
    spec.config.bos_token, spec.config.eos_token, spec.config.unk_token = tgt_tokens[1], tgt_tokens[2], tgt_tokens[3]
    spec.config.decoder_start_token = tgt_tokens[1]
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = 1e-5
    return spec


def convert(checkpoint, out_dir, quantization=None):
    tensors, config, src_tokens, tgt_tokens = read_checkpoint(checkpoint)
    if src_tokens[2] != tgt_tokens[2]:
        raise ValueError(f"{checkpoint}: the source's <eos> ({src_tokens[2]!r}) and the target's ({tgt_tokens[2]!r}) differ")
    spec = build_spec(tensors, config, src_tokens, tgt_tokens)
    spec.validate()
    spec.optimize(quantization=quantization)
    os.makedirs(out_dir, exist_ok=True)
    spec.save(out_dir)
    return config


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("out_dir")
    parser.add_argument("--quantization", default=None, help="CTranslate2's weight type, e.g. int8 (default: float32)")
    parser.add_argument("--force", action="store_true", help="replace an existing OUT_DIR")
    args = parser.parse_args()
    if os.path.exists(args.out_dir):
        if not args.force:
            sys.exit(f"ct2_convert: {args.out_dir} exists (add --force to replace it)")
        shutil.rmtree(args.out_dir)
    try:
        convert(args.checkpoint, args.out_dir, args.quantization)
    except (ValueError, KeyError, OSError) as e:
        sys.exit(f"ct2_convert: {e}")
    print(f"ct2_convert: {args.checkpoint} -> {args.out_dir}" + (f" ({args.quantization})" if args.quantization else ""))


if __name__ == "__main__":
    main()
