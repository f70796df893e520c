#!/usr/bin/env python3
"""Translate with a seqgrad translator exported to ONNX (`seqgrad export`), in onnxruntime.

    seqgrad export --checkpoint runs/default/best.safetensors --out exported
    seqgrad quantize --checkpoint runs/default/best.safetensors --out int8.safetensors
    seqgrad export --checkpoint int8.safetensors --out exported    # int8 graphs, same inputs and outputs
    python3 examples/onnx/translate.py exported "Ein Mann fährt Fahrrad."
    python3 examples/onnx/translate.py exported < sentences.txt     # one sentence per line

Greedy search, as `seqgrad translate --beam 1`: encoder.onnx once per sentence, then
decoder_step.onnx once per output token until <eos> (or --max-len tokens). Between steps the GRU
carries its hidden state, the Transformer each layer's self-attention key/value cache (past_key_i,
past_value_i in, present_key_i, present_value_i out, empty before the first token) and the
cross-attention's keys and values, which encoder.onnx computes once. The word tokenizer below
follows models/text/tokenizer.h (translator.json names its settings), so the ids match seqgrad's; a
subword checkpoint's export carries its SentencePiece models (src.spm.model, tgt.spm.model), read
with the sentencepiece package. Needs numpy and onnxruntime (pip install onnxruntime), and for
subword exports sentencepiece (pip install sentencepiece).
"""
import argparse
import json
import os
import sys

import numpy as np
import onnxruntime as ort


# ---- the tokenizer of models/text/tokenizer.cpp ("seqgrad.words")
def is_blank(c):
    cp = ord(c)
    return c.isspace() or cp < 0x20 or cp == 0x7F or 0x80 <= cp < 0xA0 or cp in (0x200B, 0xFEFF)


def is_dropped(c):
    cp = ord(c)
    return cp == 0xAD or 0x200C <= cp <= 0x200F or 0x202A <= cp <= 0x202E or 0x2060 <= cp <= 0x2064


def normalize_spaces(text):
    out, pending = [], False
    for c in text:
        if is_dropped(c):
            continue
        if is_blank(c):
            pending = bool(out)
            continue
        if pending:
            out.append(" ")
        pending = False
        out.append(c)
    return "".join(out)


def is_punctuation(c):
    cp = ord(c)
    if cp < 0x80:
        return 0x21 <= cp <= 0x2F or 0x3A <= cp <= 0x40 or 0x5B <= cp <= 0x60 or 0x7B <= cp <= 0x7E
    if 0xA1 <= cp <= 0xBF:
        return cp not in (0xAA, 0xB2, 0xB3, 0xB5, 0xB9, 0xBA) and not 0xBC <= cp <= 0xBE
    return cp in (0xD7, 0xF7, 0x2BC) or 0x2010 <= cp <= 0x205E or 0x20A0 <= cp <= 0x20CF


def joins_word(cps, i):
    if i == 0 or i + 1 >= len(cps):
        return False
    prev, c, nxt = cps[i - 1], cps[i], cps[i + 1]
    if c in "-.":
        return prev != " " and nxt != " " and not is_punctuation(prev) and not is_punctuation(nxt)
    if c in ",:":
        return prev.isascii() and prev.isdigit() and nxt.isascii() and nxt.isdigit()
    return False


def is_inner_apostrophe(cps, i):
    return (cps[i] in "'\u2019\u02bc" and 0 < i < len(cps) - 1 and cps[i - 1] != " " and cps[i + 1] != " "
            and not is_punctuation(cps[i - 1]) and not is_punctuation(cps[i + 1]))


def tokenize(text, lowercase=True, apostrophe="attach_left"):
    clean = normalize_spaces(text)
    # per character, as seqgrad does: a word-final Σ lowers to σ (Python's str.lower() gives ς)
    cps = "".join(c.lower() for c in clean) if lowercase else clean
    tokens, word = [], []

    def flush():
        if word:
            tokens.append("".join(word))
            word.clear()

    i = 0
    while i < len(cps):
        c = cps[i]
        if c == " ":
            flush()
        elif is_inner_apostrophe(cps, i):
            if apostrophe == "attach_right":
                flush()
            word.append("'")
            if apostrophe == "attach_left":
                flush()
        elif not is_punctuation(c) or joins_word(cps, i):
            word.append(c)
        elif c == ".":
            end = i
            while end < len(cps) and cps[end] == ".":
                end += 1
            flush()
            tokens.append("." * (end - i))
            i = end - 1
        else:
            flush()
            tokens.append(c)
        i += 1
    flush()
    return tokens


CLOSING = {",", "!", "?", ";", ":", ")", "]", "}", "%", "»", "”", "’", "›", "…"}
OPENING = {"(", "[", "{", "«", "“", "„", "‘", "‚", "‹", "¿", "¡"}


def detokenize(tokens):
    out, glue_next, inside = "", True, {'"': False, "'": False}
    for t in tokens:
        glue_before = t in CLOSING or t.startswith(".") or (len(t) > 1 and t[0] == "'") or t == "/"
        glue_after = t in OPENING or (len(t) > 1 and t[-1] == "'") or t == "/"
        if t in inside:  # straight quotes alternate opening, closing
            glue_before, glue_after = inside[t], not inside[t]
            inside[t] = not inside[t]
        if out and not glue_next and not glue_before:
            out += " "
        out += t
        glue_next = glue_after
    return out


# ---- the translator
class Translator:
    def __init__(self, folder, threads=0):
        with open(os.path.join(folder, "translator.json"), encoding="utf-8") as f:
            self.info = json.load(f)
        if self.info.get("format") != "seqgrad.onnx_translator" or "src_vocab" not in self.info:
            raise ValueError(f"{folder}/translator.json is not a seqgrad translator export with vocabularies")
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        providers = ["CPUExecutionProvider"]
        self.encoder = ort.InferenceSession(os.path.join(folder, "encoder.onnx"), options, providers=providers)
        self.step = ort.InferenceSession(os.path.join(folder, "decoder_step.onnx"), options, providers=providers)
        self.src_ids = {t: i for i, t in enumerate(self.info["src_vocab"])}
        self.tgt_tokens = self.info["tgt_vocab"]
        self.special = self.info["special_ids"]
        # the longest output `seqgrad translate` produces for this model (50 for an export without one)
        self.max_len = self.info.get("max_output_tokens", 50)
        # a Transformer export's position table: its graphs take this many positions a side
        self.max_positions = self.info.get("max_positions")
        self.tokenizer = self.info["tokenizer"]
        self.pieces = None  # (source, target) SentencePiece processors of a subword export
        if self.tokenizer["kind"] == "sentencepiece":
            try:
                import sentencepiece
            except ImportError:
                raise ValueError(f"{folder} holds a subword (SentencePiece) translator: pip install sentencepiece")
            self.pieces = [sentencepiece.SentencePieceProcessor(model_file=os.path.join(folder, self.tokenizer[side]))
                           for side in ("src_model", "tgt_model")]

    def split(self, sentence):
        if self.pieces:
            return self.pieces[0].encode(sentence, out_type=str)
        return tokenize(sentence, self.tokenizer["lowercase"], self.tokenizer["apostrophe"])

    def join(self, tokens):
        return self.pieces[1].decode_pieces(tokens) if self.pieces else detokenize(tokens)

    def encode(self, sentence):
        tokens = self.split(sentence)
        if not tokens:
            raise ValueError(f"the input sentence '{sentence}' is empty (nothing to translate)")
        limit = self.tokenizer["max_source_tokens"]
        if limit and len(tokens) > limit:
            print(f"warning: sentence truncated to {limit} tokens", file=sys.stderr)
            tokens = tokens[:limit]
        ids = [self.src_ids.get(t, self.special["unk"]) for t in tokens]
        return ids + [self.special["eos"]] if self.tokenizer["append_eos"] else ids

    def start(self, src_ids):
        """The decoder's state before the first token, by the export's architecture: the encoder's
        outputs, and the GRU's hidden state or the Transformer's empty key/value caches."""
        src = np.array([src_ids], dtype=np.int64)
        names = [o.name for o in self.encoder.get_outputs()]
        state = dict(zip(names, self.encoder.run(names, {"src": src, "src_lengths": np.array([len(src_ids)], np.int64)})))
        model = self.info["model"]
        if model.get("architecture") == "transformer":
            state.pop("memory")  # the step reads the cross-attention's keys and values instead
            heads, head_size = model["heads"], model["hidden_size"] // model["heads"]
            for i in range(model["num_layers"]):
                for kind in ("key", "value"):
                    state[f"past_{kind}_{i}"] = np.zeros((1, heads, 0, head_size), np.float32)
        return state

    def advance(self, state, y):
        """One decoder step from the previous token y (1,): log-probabilities (1, V), attention
        weights (1, S) and the next state."""
        names = [o.name for o in self.step.get_outputs()]
        out = dict(zip(names, self.step.run(names, {"y_prev": y, **state})))
        state = dict(state)
        for name, value in out.items():
            if name == "new_state":  # the GRU's
                state["state"] = value
            elif name.startswith("present_"):  # the Transformer's caches, one position longer
                state["past_" + name[len("present_"):]] = value
        return out["log_probs"], out["weights"], state

    def greedy(self, src_ids, max_len=None):
        """Target ids without <bos>/<eos>, the attention rows and the log-probability of each
        produced token (<eos> included)."""
        max_len = max_len or self.max_len
        if self.max_positions and max(len(src_ids), max_len) > self.max_positions:
            raise ValueError(f"{len(src_ids)} source tokens or {max_len} output tokens: the export's position table "
                             f"holds {self.max_positions} positions (max_positions in translator.json)")
        state = self.start(src_ids)
        y = np.array([self.special["bos"]], dtype=np.int64)
        out, attention, log_probs = [], [], []
        for _ in range(max_len):
            step_log_probs, weights, state = self.advance(state, y)
            y = step_log_probs.argmax(-1)
            attention.append(weights[0])
            log_probs.append(float(step_log_probs[0, y[0]]))
            if int(y[0]) == self.special["eos"]:
                break
            out.append(int(y[0]))
        return out, attention, log_probs

    def translate(self, sentence, max_len=None):
        ids, _, _ = self.greedy(self.encode(sentence), max_len)
        skip = {self.special["pad"], self.special["bos"], self.special["eos"]}
        return self.join([self.tgt_tokens[i] for i in ids if i not in skip])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", help="the output folder of `seqgrad export`")
    p.add_argument("sentence", nargs="*", help="text to translate (else one per line on stdin)")
    p.add_argument("--max-len", type=int, default=None,
                   help="longest output in tokens (default: the export's max_output_tokens, as seqgrad translate)")
    p.add_argument("--threads", type=int, default=0, help="onnxruntime threads (default: its own choice)")
    a = p.parse_args()
    translator = Translator(a.folder, a.threads)
    sentences = a.sentence or [line.rstrip("\n") for line in sys.stdin]
    status = 0
    for i, s in enumerate(sentences):
        try:
            print(translator.translate(s, a.max_len))
        except ValueError as e:
            print(f"translate.py: error: sentence {i + 1}: {e}", file=sys.stderr)
            print()
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
