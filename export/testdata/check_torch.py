#!/usr/bin/python3
"""Loads hpctrain's safetensors export into PyTorch modules and runs them.

    check_torch.py MODEL.safetensors IMAGES.idx N OUT.bin

Reads the file by the safetensors specification (no safetensors package
needed), builds the nn.Module the model description in its metadata
describes (build_module: the module a PyTorch user would write, with
hpctrain's layer names as attribute names), loads the tensors with
load_state_dict(strict=True), and runs it in eval mode on the first N
images of the IDX file, normalised as the metadata says. Writes the
logits (N, classes) as little-endian float32 to OUT.bin.

build_module and load_safetensors can be imported to use an hpctrain
export from PyTorch:

    meta, tensors = load_safetensors("cnn.safetensors")
    net = build_module(meta)
    net.load_state_dict(tensors)
    net.eval()

Run with Debian's python3-torch (/usr/bin/python3).
"""
import json
import struct
import sys

import numpy as np
import torch
from torch import nn

from check_onnx import normalised_input, read_idx

DTYPES = {"F32": (np.float32, torch.float32), "I64": (np.int64, torch.int64)}


def load_safetensors(path):
    """(metadata, {name: tensor}) of a safetensors file, checked as the
    format's reference implementation checks it: an 8-byte header length,
    a JSON header, and tensors that exactly tile the data that follows."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors, spans = {}, []
    for name, e in header.items():
        npt, tt = DTYPES[e["dtype"]]
        b, end = e["data_offsets"]
        count = int(np.prod(e["shape"])) if e["shape"] else 1
        assert end - b == count * np.dtype(npt).itemsize, f"{name}: {end - b} bytes for shape {e['shape']}"
        arr = np.frombuffer(data, dtype=np.dtype(npt).newbyteorder("<"), count=count, offset=b)
        tensors[name] = torch.from_numpy(arr.astype(npt).reshape(e["shape"]))
        spans.append((b, end))
    spans.sort()
    pos = 0
    for b, end in spans:
        assert b == pos, f"gap or overlap at byte {b}"
        pos = end
    assert pos == len(data), f"tensors cover {pos} of {len(data)} data bytes"
    return meta, tensors


PREFIX = {"conv": "conv", "linear": "fc", "relu": "relu", "maxpool": "pool", "avgpool": "avgpool",
          "globalavgpool": "gap", "flatten": "flatten", "batchnorm": "bn", "dropout": "dropout", "residual": "res"}


class Seq(nn.Module):
    """Layers applied in order, registered under hpctrain's names (conv1,
    relu1, ...). A linear layer flattens a map first (torch.flatten(x, 1):
    channels-first order); a convolution or pool given a flat vector sees
    it as a 1x1 map, as hpctrain does."""

    def forward(self, x):
        for m in self.children():
            x = apply(m, x)
        return x


def apply(m, x):
    if isinstance(m, nn.Linear) and x.dim() > 2:
        x = torch.flatten(x, 1)
    if isinstance(m, (nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, Residual)) and x.dim() == 2:
        x = x[:, :, None, None]
    return m(x)


class Residual(Seq):
    """y = body(x) + proj(x) (or + x): the body's layers are this module's
    children, the projection shortcut the child named proj."""

    def forward(self, x):
        y = x
        for name, m in self.named_children():
            if name != "proj":
                y = apply(m, y)
        s = apply(self.proj, x) if hasattr(self, "proj") else x
        if y.dim() != s.dim():
            y, s = torch.flatten(y, 1), torch.flatten(s, 1)
        return y + s


def build_layers(seq, layers, shape):
    """Adds layers to seq for input shape (C, H, W) or (F,), returns the
    output shape."""
    counts = {}
    for l in layers:
        p = PREFIX[l["kind"]]
        counts[p] = counts.get(p, 0) + 1
        name = f"{p}{counts[p]}"
        k = l["kind"]
        flat = len(shape) == 1
        c = shape[0]
        if k == "conv":
            h, w = (1, 1) if flat else shape[1:]
            kk, s, pd = l["kernel"], l["stride"], l["pad"]
            m = nn.Conv2d(c, l["out"], kk, stride=s, padding=pd, bias=l["bias"])
            shape = (l["out"], (h + 2 * pd - kk) // s + 1, (w + 2 * pd - kk) // s + 1)
        elif k == "linear":
            m = nn.Linear(int(np.prod(shape)), l["out"], bias=l["bias"])
            shape = (l["out"],)
        elif k == "relu":
            m = nn.ReLU()
        elif k == "dropout":
            m = nn.Dropout(l["p"])
        elif k in ("maxpool", "avgpool"):
            h, w = (1, 1) if flat else shape[1:]
            kk, s = l["kernel"], l["stride"]
            m = (nn.MaxPool2d if k == "maxpool" else nn.AvgPool2d)(kk, s)
            shape = (c, (h - kk) // s + 1, (w - kk) // s + 1)
        elif k == "globalavgpool":
            m = nn.AdaptiveAvgPool2d(1)
            shape = (c, 1, 1)
        elif k == "flatten":
            m = nn.Flatten()
            shape = (int(np.prod(shape)),)
        elif k == "batchnorm":
            m = (nn.BatchNorm1d if flat else nn.BatchNorm2d)(c, eps=l["eps"], momentum=l["momentum"])
        elif k == "residual":
            m = Residual()
            out = build_layers(m, l["layers"], shape)
            if l["shortcut"] != "identity":
                h, w = (1, 1) if flat else shape[1:]
                oh, ow = (1, 1) if len(out) == 1 else out[1:]
                s = next(s for s in range(1, max(h, w) + 1) if (h - 1) // s + 1 == oh and (w - 1) // s + 1 == ow)
                proj = Seq()
                proj.add_module("conv1", nn.Conv2d(c, out[0], 1, stride=s, bias=l["shortcut"] == "conv"))
                if l["shortcut"] == "projection":
                    proj.add_module("bn1", nn.BatchNorm2d(out[0]))
                m.add_module("proj", proj)
            shape = out
        else:
            raise SystemExit(f"layer {name}: kind {k} unknown to this script")
        seq.add_module(name, m)
    return shape


def build_module(meta):
    """The nn.Module of an export's metadata (its "layers" and
    "input_shape")."""
    net = Seq()
    out = build_layers(net, json.loads(meta["layers"]), tuple(json.loads(meta["input_shape"])))
    assert int(np.prod(out)) == int(meta["classes"]), (out, meta["classes"])
    return net


def main():
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    path, idx, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    meta, tensors = load_safetensors(path)
    assert meta.get("format") == "pt", meta.get("format")
    net = build_module(meta)
    net.load_state_dict(tensors, strict=True)
    net.eval()
    images = read_idx(idx, n)
    with torch.no_grad():
        logits = net(normalised_input(meta, images))
    logits = torch.flatten(logits, 1)
    assert tuple(logits.shape) == (n, int(meta["classes"])), logits.shape
    logits.numpy().astype("<f4").tofile(out)
    print(f"{path}: load_state_dict(strict=True) took {len(tensors)} tensors, logits {tuple(logits.shape)}")


if __name__ == "__main__":
    main()
