"""The parity scripts' safetensors reader and writer (the format is tiny: an 8-byte little-endian
header size, a JSON header, the raw data), so the suites need no `safetensors` package.

    from safetensors_io import save_safetensors, load_safetensors
"""
import json

import numpy as np
import torch

# safetensors dtype name <-> numpy type
NUMPY_OF = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "I8": np.int8, "BOOL": np.bool_}
NAME_OF = {np.dtype(t): name for name, t in NUMPY_OF.items()}


def _as_numpy(t):
    """A torch tensor or numpy array as a contiguous little-endian numpy array."""
    a = t.detach().contiguous().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    return np.array(a, dtype=a.dtype.newbyteorder("<"), order="C")  # ascontiguousarray would make 0-d 1-d


def save_safetensors(path, tensors, metadata):
    """Writes {name: torch tensor or numpy array} with string metadata; 8-byte types first, so
    every tensor's data is aligned to its element size."""
    arrays = {name: _as_numpy(t) for name, t in tensors.items()}
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(arrays, key=lambda n: (-arrays[n].itemsize, n)):
        a = arrays[name]
        data = a.tobytes()
        header[name] = {"dtype": NAME_OF[a.dtype.newbyteorder("=")], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def load_safetensors(path, as_numpy=False):
    """Returns ({name: torch tensor, or numpy array with as_numpy}, metadata)."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    metadata = header.pop("__metadata__", {})
    base, tensors = 8 + n, {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        array = np.frombuffer(raw[base + begin:base + end], dtype=NUMPY_OF[info["dtype"]]).reshape(info["shape"])
        tensors[name] = array if as_numpy else torch.from_numpy(array.copy())
    return tensors, metadata
