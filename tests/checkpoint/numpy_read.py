#!/usr/bin/python3
"""Reads a safetensors file as Python's safetensors.numpy.load does (8-byte little-endian header
length, JSON header, tensors back to back in the data section) and prints, per tensor sorted by
name: name, dtype, shape and the float64 sum of its values. Exit status 1 on any format problem."""
import json
import struct
import sys

import numpy as np

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
          "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def load(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    header.pop("__metadata__", None)
    # The Rust reader's rule: tensors cover the data section back to back, without holes.
    spans = sorted(tuple(v["data_offsets"]) for v in header.values())
    end = 0
    for begin, stop in spans:
        if begin != end:
            raise ValueError(f"hole or overlap at byte {begin}")
        end = stop
    if end != len(body):
        raise ValueError(f"data section has {len(body)} bytes, tensors cover {end}")
    out = {}
    for name, v in header.items():
        begin, stop = v["data_offsets"]
        if v["dtype"] == "BF16":  # numpy has no bfloat16: widen to float32
            raw = np.frombuffer(body[begin:stop], dtype=np.uint16).astype(np.uint32) << 16
            array = raw.view(np.float32)
        else:
            array = np.frombuffer(body[begin:stop], dtype=DTYPES[v["dtype"]])
        out[name] = (v["dtype"], array.reshape(v["shape"]))
    return out


if __name__ == "__main__":
    try:
        for name, (dtype, array) in sorted(load(sys.argv[1]).items()):
            shape = ",".join(str(d) for d in array.shape)
            print(f"{name} {dtype} [{shape}] {float(array.astype(np.float64).sum()):.6f}")
    except Exception as e:  # a format problem
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
