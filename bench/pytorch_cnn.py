#!/usr/bin/python3
"""The reference CNN in PyTorch, for side-by-side comparison with hpctrain.

Same network (conv 1->32 3x3 pad 1, ReLU, maxpool 2, conv 32->64, ReLU,
maxpool 2, linear 3136->512, linear 512->10), same recipe (SGD lr 0.01
momentum 0.9, batch 64, cross-entropy, pixels in [0,1], data in memory).
Prints one JSON line: samples/s over the timed steps.

    /usr/bin/python3 bench/pytorch_cnn.py --model cnn --threads 1 --steps 60
"""
import argparse, gzip, json, time
import numpy as np
import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--model", default="cnn")
p.add_argument("--threads", type=int, default=1)
p.add_argument("--steps", type=int, default=60)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--data", default="/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
a = p.parse_args()
torch.set_num_threads(a.threads)
with gzip.open(a.data) as f:
    x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
x = torch.from_numpy(x[: a.batch * (a.steps + 5)].astype(np.float32) / 255)
y = torch.randint(0, 10, (x.shape[0],))
if a.model == "cnn":
    net = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(3136, 512), nn.Linear(512, 10))
else:
    net = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 10))
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()

def step(i):
    xb, yb = x[i * a.batch:(i + 1) * a.batch], y[i * a.batch:(i + 1) * a.batch]
    opt.zero_grad()
    loss_fn(net(xb), yb).backward()
    opt.step()

for i in range(5):
    step(i)
t = time.perf_counter()
for i in range(a.steps):
    step(5 + i)
dt = time.perf_counter() - t
print(json.dumps({"framework": "pytorch " + torch.__version__, "model": a.model, "threads": a.threads,
                  "batch": a.batch, "samples_per_second": a.batch * a.steps / dt}))
