#!/usr/bin/python3
"""Checks hpctrain's ONNX export with ONNX's own checker and runs it.

    check_onnx.py MODEL.onnx IMAGES.idx N OUT.bin

Runs onnx.checker.check_model (full check: shape inference too), checks
what hpctrain promises (opset >= 13, input "input" NCHW with a symbolic
batch dimension, output "logits"), then evaluates the graph on the first N
images of the IDX file, normalised as the model's metadata says, with a
small reference evaluator built on PyTorch's functional operations, one
per ONNX operator; a node of any other operator is an error. Writes the
logits (N, classes) as little-endian float32 to OUT.bin.

Run with Debian's python3-onnx and python3-torch (/usr/bin/python3).
"""
import gzip
import json
import sys

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper


def read_idx(path, n):
    """The first n images of an IDX file of bytes (raw or gzip), (n, H, W, C)."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if raw[:3] != b"\x00\x00\x08":
        raise SystemExit(f"{path}: not an IDX file of unsigned bytes")
    nd = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    if nd == 3:
        dims.append(1)
    size = dims[1] * dims[2] * dims[3]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * nd, count=dims[0] * size)
    return data.reshape(dims)[:n]


def preprocessed(meta, images):
    """images (N, H, W, C) of the metadata's sample_shape, through its
    preprocess steps (resize=HxW[:nearest], center_crop=HxW) as hpctrain's
    evaluation runs them: a bilinear resize as interpolate's with
    align_corners=False, rounded half up back to bytes (round() rounds
    half to even: a pixel at .5 one apart), a nearest one as interpolate's
    "nearest-exact" (its "nearest" samples other pixels)."""
    c, h, w = json.loads(meta["sample_shape"])
    assert images.shape[1:] == (h, w, c), f"images {images.shape[1:]}, model sample {(h, w, c)}"
    for step in json.loads(meta["preprocess"]):
        op, _, arg = step.partition("=")
        size, _, how = arg.partition(":")
        th, tw = (int(v) for v in size.split("x"))
        if op == "resize":
            x = torch.from_numpy(images.astype(np.float32)).permute(0, 3, 1, 2)
            if how == "nearest":
                x = F.interpolate(x, size=(th, tw), mode="nearest-exact")
            else:
                x = F.interpolate(x, size=(th, tw), mode="bilinear", align_corners=False)
            images = torch.floor(x.permute(0, 2, 3, 1) + 0.5).clamp(0, 255).numpy().astype(np.uint8)
        elif op == "center_crop":
            top, left = (images.shape[1] - th) // 2, (images.shape[2] - tw) // 2
            images = images[:, top:top + th, left:left + tw, :]
        else:
            raise SystemExit(f"preprocess step {step!r}: not known here")
    return images


def normalised_input(meta, images):
    """NCHW float32 as the metadata says: (pixel/255 - mean[c]) / std[c]."""
    images = preprocessed(meta, images)
    mean = np.array(json.loads(meta["mean"]), dtype=np.float32)
    std = np.array(json.loads(meta["std"]), dtype=np.float32)
    x = images.astype(np.float32) / np.float32(255)
    x = (x - mean) / std  # (N, H, W, C), channels last
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def run(model, x):
    """Evaluates model's graph on x with torch.nn.functional, node by node."""
    env = {"input": x}
    for init in model.graph.initializer:
        env[init.name] = torch.from_numpy(numpy_helper.to_array(init).copy())
    for node in model.graph.node:
        a = attrs(node)
        ins = [env[name] for name in node.input]
        op = node.op_type
        if op == "Conv":
            k, s, p = a["kernel_shape"], a.get("strides", [1, 1]), a.get("pads", [0, 0, 0, 0])
            assert p[0] == p[2] and p[1] == p[3], "asymmetric pads"
            assert list(ins[1].shape[2:]) == list(k)
            y = F.conv2d(ins[0], ins[1], ins[2] if len(ins) > 2 else None, stride=tuple(s), padding=(p[0], p[1]))
        elif op == "Gemm":
            assert a.get("transB", 0) == 1 and a.get("transA", 0) == 0
            y = ins[0] @ ins[1].T
            if len(ins) > 2:
                y = y + ins[2]
        elif op == "Relu":
            y = F.relu(ins[0])
        elif op == "MaxPool":
            assert "pads" not in a or not any(a["pads"])
            y = F.max_pool2d(ins[0], tuple(a["kernel_shape"]), tuple(a.get("strides", a["kernel_shape"])))
        elif op == "AveragePool":
            assert "pads" not in a or not any(a["pads"])
            y = F.avg_pool2d(ins[0], tuple(a["kernel_shape"]), tuple(a.get("strides", a["kernel_shape"])))
        elif op == "GlobalAveragePool":
            y = ins[0].mean(dim=(2, 3), keepdim=True)
        elif op == "Flatten":
            axis = a.get("axis", 1)
            y = ins[0].reshape(int(np.prod(ins[0].shape[:axis])), -1)
        elif op == "Unsqueeze":
            y = ins[0]
            for ax in sorted(int(v) for v in ins[1].tolist()):
                y = y.unsqueeze(ax)
        elif op == "BatchNormalization":
            y = F.batch_norm(ins[0], ins[3], ins[4], ins[1], ins[2], training=False, eps=a.get("epsilon", 1e-5))
        elif op == "Add":
            y = ins[0] + ins[1]
        elif op == "Identity":
            y = ins[0]
        else:
            raise SystemExit(f"node {node.name}: operator {op} not in the reference evaluator")
        env[node.output[0]] = y
    return env[model.graph.output[0].name]


def main():
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    path, idx, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    opsets = {o.domain: o.version for o in model.opset_import}
    assert opsets.get("", 0) >= 13, f"opset {opsets}"
    (inp,), (outp,) = model.graph.input, model.graph.output
    dims = inp.type.tensor_type.shape.dim
    assert inp.name == "input" and len(dims) == 4 and dims[0].dim_param and not dims[0].HasField("dim_value"), "input is not (batch, C, H, W) with a symbolic batch"
    assert outp.name == "logits", outp.name
    meta = {p.key: p.value for p in model.metadata_props}
    c, h, w = json.loads(meta["input_shape"])
    assert [d.dim_value for d in dims[1:]] == [c, h, w], (dims, meta["input_shape"])
    images = read_idx(idx, n)
    with torch.no_grad():
        logits = run(model, normalised_input(meta, images))
    assert tuple(logits.shape) == (n, int(meta["classes"])), logits.shape
    logits.numpy().astype("<f4").tofile(out)
    print(f"{path}: checker passed, opset {opsets['']}, {len(model.graph.node)} nodes, logits {tuple(logits.shape)}")


if __name__ == "__main__":
    main()
