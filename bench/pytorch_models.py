#!/usr/bin/python3
"""hpctrain's built-in networks in PyTorch, for side-by-side timing.

Same networks as model/models/*.toml, same recipe (SGD lr 0.01 momentum
0.9, batch 64, cross-entropy, training mode: batch norm normalises with
the batch's statistics), data in memory: Fashion-MNIST pixels in [0,1]
for 28x28x1 (random when the file is missing), random pixels in [0,1)
for other shapes; random labels. Every step is timed on its own; prints
one JSON line whose samples_per_second is batch / MEDIAN step, the
statistic `hpctrain bench step` reports.

--precision bf16 runs forward and loss under torch.autocast("cpu",
dtype=torch.bfloat16), PyTorch's CPU mixed precision: convolutions and
linear layers compute in bf16, the parameters (master weights), their
gradients and the SGD update stay fp32, backward runs outside the autocast
context. Unlike hpctrain's bf16, the ops autocast does not list (batch
norm, ReLU, pooling) run in the dtype they are given, so on bf16 conv
outputs they run in bf16 too. Before timing, one forward records the
output dtype of every kind of layer ("compute_dtypes" in the JSON, and a
line on stderr); bf16 that does not reach the convolutions and linear
layers stops the run.

    /usr/bin/python3 bench/pytorch_models.py --model resnet8 --input 32x32x3 --threads 1 --steps 40
    # check the network against hpctrain's (layer names, output shapes, parameters):
    ./hpctrain summary -model resnet8 -input 32x32x3 -json > s.json
    /usr/bin/python3 bench/pytorch_models.py --model resnet8 --input 32x32x3 --check s.json --steps 0
    # bf16 mixed precision (autocast), with the dtype check only:
    /usr/bin/python3 bench/pytorch_models.py --model cnn --precision bf16 --steps 0

Modules are named as hpctrain names its layers (conv1, bn1, res2.proj.conv1,
fc1), so --check compares them one by one.
"""
import argparse, collections, ctypes, gzip, json, os, re, statistics, sys, time
import numpy as np
import torch
import torch.nn as nn


def parse_shape(s):
    h, w, c = (int(v) for v in s.split("x"))
    return h, w, c


class Proj(nn.Module):
    """Option-B shortcut: 1x1 convolution of the block's stride, no bias, batch norm."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 1, stride=stride, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)

    def forward(self, x):
        return self.bn1(self.conv1(x))


class Basic(nn.Module):
    """conv 3x3 (stride s), BN, ReLU, conv 3x3, BN, plus the shortcut (ReLU after, outside)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.proj = Proj(cin, cout, stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        y = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        return y + (self.proj(x) if self.proj is not None else x)


def seq(*named):
    """nn.Sequential of (name, module) pairs: the names are hpctrain's."""
    return nn.Sequential(collections.OrderedDict(named))


def resnet(n, cin, classes):
    """He et al.'s CIFAR ResNet with 6n+2 layers, option-B shortcuts, as
    model/models/resnet8.toml (n = 1) and resnet20.toml (n = 3)."""
    m = [("conv1", nn.Conv2d(cin, 16, 3, padding=1, bias=False)), ("bn1", nn.BatchNorm2d(16)), ("relu1", nn.ReLU())]
    c, k = 16, 1
    for stage, width in enumerate((16, 32, 64)):
        for b in range(n):
            stride = 2 if stage > 0 and b == 0 else 1
            m += [("res%d" % k, Basic(c, width, stride)), ("relu%d" % (k + 1), nn.ReLU())]
            c, k = width, k + 1
    m += [("gap1", nn.AdaptiveAvgPool2d(1)), ("flatten", nn.Flatten()), ("fc1", nn.Linear(64, classes))]
    return seq(*m)


def build(model, shape, classes):
    h, w, c = shape
    if model == "cnn":  # as hpctrain's: no ReLU between fc1 and fc2
        return seq(("conv1", nn.Conv2d(c, 32, 3, padding=1)), ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
                   ("conv2", nn.Conv2d(32, 64, 3, padding=1)), ("relu2", nn.ReLU()), ("pool2", nn.MaxPool2d(2)),
                   ("flatten1", nn.Flatten()), ("fc1", nn.Linear(64 * (h // 4) * (w // 4), 512)),
                   ("fc2", nn.Linear(512, classes)))
    if model == "mlp":
        return seq(("flatten1", nn.Flatten()), ("fc1", nn.Linear(h * w * c, 512)), ("relu1", nn.ReLU()),
                   ("fc2", nn.Linear(512, classes)))
    if model == "resnet8":
        return resnet(1, c, classes)
    if model == "resnet20":
        return resnet(3, c, classes)
    raise SystemExit("pytorch_models: unknown model %r (cnn, mlp, resnet8, resnet20)" % model)


PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}


def autocast(precision):
    """The forward's (and loss's) context for precision: CPU autocast to
    bf16, or for fp32 a disabled one (plain fp32)."""
    dt = PRECISIONS[precision]
    return torch.autocast("cpu", dtype=dt or torch.bfloat16, enabled=dt is not None)


def compute_dtypes(net, xb, yb, precision, loss_fn=None):
    """Runs one forward and loss in precision's context (no gradients) and
    returns the output dtype of each kind of layer (first one of each kind)
    and of the loss, e.g. {"Conv2d": "bfloat16", "Linear": "bfloat16",
    "loss": "float32"}. Exits when bf16 does not reach the convolutions and
    linear layers."""
    seen = {}

    def hook(m, i, o):  # returns None: the output stays as it is
        seen.setdefault(type(m).__name__, str(o.dtype).replace("torch.", ""))

    hooks = [m.register_forward_hook(hook) for m in net.modules() if not list(m.children())]
    with torch.no_grad(), autocast(precision):
        out = net(xb)
        if loss_fn is not None:
            seen["loss"] = str(loss_fn(out, yb).dtype).replace("torch.", "")
    for hk in hooks:
        hk.remove()
    want = str(PRECISIONS[precision] or torch.float32).replace("torch.", "")
    bad = [k for k in ("Conv2d", "Linear") if k in seen and seen[k] != want]
    if bad:
        raise SystemExit("pytorch_models: --precision %s, but %s output %s" % (
            precision, ", ".join(bad), ", ".join(seen[k] for k in bad)))
    if precision != "fp32":
        print("pytorch_models: --precision %s, output dtypes %s" % (
            precision, " ".join("%s=%s" % kv for kv in seen.items())), file=sys.stderr)
    return seen


def build_info():
    """What this PyTorch computes with on the CPU: oneDNN version, the SIMD
    level its own kernels dispatch to, the BLAS it was built with."""
    cfg = torch.__config__.show()
    pick = lambda pat: (re.search(pat, cfg) or [None, None])[1]
    return {"onednn": pick(r"MKL-DNN (v[\d.]+)"), "cpu_capability": pick(r"CPU capability usage: (\S+)"),
            "blas": pick(r"BLAS_INFO=([^,\s]+)"), "onednn_isa": onednn_isa()}


# oneDNN's dnnl_cpu_isa_t values (dnnl_types.h, v2.6).
ONEDNN_ISAS = {0x1: "sse41", 0x3: "avx", 0x7: "avx2", 0x407: "avx2_vnni", 0x27: "avx512_core",
               0x67: "avx512_core_vnni", 0xe7: "avx512_core_bf16", 0x3e7: "avx512_core_amx"}


def onednn_isa():
    """The instruction set oneDNN runs in this process, DNNL_MAX_CPU_ISA
    applied: asked of the libdnnl that torch loaded (Debian's torch links
    the system's libdnnl.so.2, the one hpctrain links). None when no
    libdnnl is mapped (a torch with oneDNN built in)."""
    try:
        with open("/proc/self/maps") as f:
            path = next(l.split()[-1] for l in f if "/libdnnl.so" in l)
        isa = ctypes.CDLL(path).dnnl_get_effective_cpu_isa()
    except (StopIteration, OSError, AttributeError):
        return None
    return ONEDNN_ISAS.get(isa, hex(isa))


def params(net):
    return sum(p.numel() for p in net.parameters())


def check(net, shape, summary_path):
    """Compares net with `hpctrain summary -json`: every conv, batchnorm and
    linear layer by name (output HxWxC and parameters), and the totals.
    Returns (pytorch params, hpctrain params); exits on a difference."""
    with open(summary_path) as f:
        s = json.load(f)
    h, w, c = shape
    outs = {}
    mods = dict(net.named_modules())
    hooks = [m.register_forward_hook(lambda m, i, o, name=name: outs.__setitem__(name, tuple(o.shape)))
             for name, m in mods.items() if isinstance(m, (nn.Conv2d, nn.BatchNorm2d, nn.Linear))]
    net.eval()
    with torch.no_grad():
        net(torch.zeros(1, c, h, w))
    net.train()
    for hk in hooks:
        hk.remove()
    bad, seen = [], set()
    for l in s["layers"]:
        if l["kind"] not in ("conv", "batchnorm", "linear"):
            continue
        name = l["name"]
        seen.add(name)
        if name not in mods:
            bad.append("%s: not in the PyTorch network" % name)
            continue
        o = outs[name]
        got = "%dx%dx%d" % (o[2], o[3], o[1]) if len(o) == 4 else "1x1x%d" % o[1]
        p = sum(t.numel() for t in mods[name].parameters())
        if got != l["output"] or p != l["params"]:
            bad.append("%s: PyTorch %s %d params, hpctrain %s %d" % (name, got, p, l["output"], l["params"]))
    bad += ["%s: not in hpctrain's network" % n for n in outs if n not in seen]
    if params(net) != s["params"]:
        bad.append("total: PyTorch %d params, hpctrain %d" % (params(net), s["params"]))
    if bad:
        raise SystemExit("pytorch_models: network differs from hpctrain's:\n  " + "\n  ".join(bad))
    return params(net), s["params"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cnn")
    p.add_argument("--input", default="28x28x1", help="one sample, HxWxC")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=60, help="timed steps (0: build and --check only)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--check", help="`hpctrain summary -json` output to compare the network with")
    p.add_argument("--precision", default="fp32", choices=sorted(PRECISIONS),
                   help="fp32, or bf16: forward and loss under torch.autocast(\"cpu\", dtype=torch.bfloat16)")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    shape = parse_shape(a.input)
    h, w, c = shape
    net = build(a.model, shape, a.classes)
    res = {"framework": "pytorch " + torch.__version__, "model": a.model, "input": a.input,
           "classes": a.classes, "threads": a.threads, "batch": a.batch, "params": params(net),
           "precision": a.precision, "pytorch_build": build_info()}
    if a.check:
        res["params"], res["hpctrain_params"] = check(net, shape, a.check)
    loss_fn = nn.CrossEntropyLoss()
    if a.steps < 1:
        if a.precision != "fp32" or a.check:
            res["compute_dtypes"] = compute_dtypes(net, torch.rand(2, c, h, w), torch.zeros(2, dtype=torch.long),
                                                   a.precision, loss_fn)
        print(json.dumps(res))
        return
    n = a.batch * (a.steps + a.warmup)
    if shape == (28, 28, 1) and os.path.exists(a.data):
        with gzip.open(a.data) as f:
            x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
        x = torch.from_numpy(x[:n].astype(np.float32) / 255)
        res["data"] = "fashion-mnist"
    else:
        x = torch.rand(n, c, h, w)
        res["data"] = "random"
    y = torch.randint(0, a.classes, (x.shape[0],))
    net.train()  # batch norm: the batch's statistics
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    res["compute_dtypes"] = compute_dtypes(net, x[:a.batch], y[:a.batch], a.precision, loss_fn)

    def step(i):
        i %= x.shape[0] // a.batch
        xb, yb = x[i * a.batch:(i + 1) * a.batch], y[i * a.batch:(i + 1) * a.batch]
        opt.zero_grad()
        with autocast(a.precision):  # forward and loss; backward outside, as PyTorch's docs show
            loss = loss_fn(net(xb), yb)
        loss.backward()
        opt.step()

    for i in range(a.warmup):
        step(i)
    ts = []
    for i in range(a.steps):
        t = time.perf_counter()
        step(a.warmup + i)
        ts.append(time.perf_counter() - t)
    med = statistics.median(ts)
    res.update({"steps": a.steps, "step_ms_median": 1e3 * med, "step_ms_mean": 1e3 * statistics.fmean(ts),
                "samples_per_second": a.batch / med})
    print(json.dumps(res))


if __name__ == "__main__":
    main()
