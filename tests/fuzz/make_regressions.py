#!/usr/bin/python3
"""Writes the fuzz targets' regression inputs too large to keep in the repository into OUT/<target>/
(tests/fuzz/build.sh calls it; run.sh runs each input once, whole, before fuzzing): issue 28's JSON
nested 200,000 deep, whose printing in an error message (nlohmann's dump() recurses once per level)
overflowed the stack, in each place a target parses JSON from a file.

    tests/fuzz/make_regressions.py OUT
"""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from test_tools_cli import checksum, read_safetensors, write_safetensors  # noqa: E402

DEEP = "[" * 200_000 + "]" * 200_000


def deep_field(text, key):
    """The JSON text with the value of its first "key" (an integer) replaced by DEEP."""
    marker = f'"{key}":'
    start = text.index(marker) + len(marker)
    end = start
    while text[end].isdigit():
        end += 1
    assert end > start, key
    return text[:start] + DEEP + text[end:]


def write(out, target, name, blob):
    os.makedirs(os.path.join(out, target), exist_ok=True)
    with open(os.path.join(out, target, name), "wb") as f:
        f.write(blob)


def main(out):
    seed = os.path.join(HERE, "seeds", "checkpoint", "translator_tiny.safetensors")
    for key, field in [("config", "hidden_size"), ("src_vocab", "version"), ("train_state", "epoch")]:
        header, data = read_safetensors(seed)
        header["__metadata__"][key] = deep_field(header["__metadata__"][key], field)
        header["__metadata__"]["seqgrad.crc32"] = checksum(header, data)
        path = os.path.join(out, "checkpoint", f"deep_{key}_{field}.safetensors")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_safetensors(path, header, data)
    vocab = '{"format":"seqgrad.vocab","version":1,"tokens":["<pad>","<bos>","<eos>","<unk>",%s]}' % DEEP
    write(out, "tokenizer", "deep_vocab_token", b"\x00" + vocab.encode())  # byte 0: the tokenizer options
    subword = '{"format":"seqgrad.vocab","version":2,"kind":%s,"model":""}' % DEEP
    write(out, "subword", "deep_vocab_kind", b"\x01" + subword.encode())  # odd byte 0: vocabulary JSON text
    header = ('{"__metadata__":{"a":"b"},"t":{"dtype":"F32","shape":%s,"data_offsets":[0,0]}}' % DEEP).encode()
    write(out, "safetensors", "deep_shape", struct.pack("<Q", len(header)) + header)


if __name__ == "__main__":
    main(sys.argv[1])
