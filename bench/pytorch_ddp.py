#!/usr/bin/python3
"""PyTorch DistributedDataParallel (gloo) training under mpirun, to set
beside `scripts/mpirun.sh -np N ./hpctrain train`.

The network is pytorch_models.py's (hpctrain's description, named as
hpctrain names its layers), the recipe hpctrain's defaults: SGD lr 0.01
momentum 0.9, batch per rank, cross-entropy, Fashion-MNIST in memory with
pixels in [0,1], the first --limit training samples sharded over the ranks
and shuffled every epoch (DistributedSampler), training-mode batch norm
with each rank's own batch statistics (DDP's default, as hpctrain without
-sync-bn). Each rank is pinned to one CPU of its mask (--bind, as hpctrain
binds its threads). Rank 0 prints one JSON line; its samples_per_second is
hpctrain's statistic: samples trained by all ranks / seconds of the
training loop (every step, the first included).

--precision bf16: forward and loss under torch.autocast("cpu",
dtype=torch.bfloat16) (bf16 convolutions and linear layers, fp32 master
weights, gradients, all-reduce and update; backward outside the context),
as pytorch_models.py --precision bf16; rank 0 checks the dtypes once
before the training loop ("compute_dtypes" in the JSON).

    mpirun -np 2 --bind-to none /usr/bin/python3 bench/pytorch_ddp.py --model resnet8 --limit 12800
    mpirun -np 2 --bind-to none /usr/bin/python3 bench/pytorch_ddp.py --model cnn --limit 25600 --precision bf16
"""
import argparse, gzip, json, os, statistics, time
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

import pytorch_models


def env(*names, default=None):
    for n in names:
        if n in os.environ:
            return int(os.environ[n])
    return default


def idx(path, offset, shape):
    with gzip.open(path) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset).reshape(shape)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet8")
    p.add_argument("--threads", type=int, default=1, help="compute threads per rank")
    p.add_argument("--batch", type=int, default=64, help="per rank")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--limit", type=int, default=0, help="first N training samples (0: all)")
    p.add_argument("--bind", type=int, default=1, help="pin rank i to the i-th CPU of the mask (1) or not (0)")
    p.add_argument("--precision", default="fp32", choices=sorted(pytorch_models.PRECISIONS),
                   help="fp32, or bf16: forward and loss under torch.autocast(\"cpu\", dtype=torch.bfloat16)")
    p.add_argument("--port", default="29531")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    rank = env("OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK", default=0)
    size = env("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE", default=1)
    local = env("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK", default=rank)
    local_size = env("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "LOCAL_WORLD_SIZE", default=size)
    if a.bind:
        cpus = sorted(os.sched_getaffinity(0))
        per = max(len(cpus) // local_size, 1)
        os.sched_setaffinity(0, cpus[(local * per) % len(cpus):][:per])
    torch.set_num_threads(a.threads)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", a.port)
    dist.init_process_group("gloo", rank=rank, world_size=size)

    x = idx(os.path.join(a.data_dir, "train-images-idx3-ubyte.gz"), 16, (-1, 1, 28, 28))
    y = idx(os.path.join(a.data_dir, "train-labels-idx1-ubyte.gz"), 8, (-1,))
    if a.limit:
        x, y = x[:a.limit], y[:a.limit]
    x = torch.from_numpy(x.astype(np.float32) / 255)
    y = torch.from_numpy(y.astype(np.int64))
    sampler = DistributedSampler(range(len(x)), num_replicas=size, rank=rank, shuffle=True, seed=1, drop_last=True)

    torch.manual_seed(1)
    net = DDP(pytorch_models.build(a.model, (28, 28, 1), 10))  # rank 0's parameters broadcast
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    dtypes = None
    if rank == 0:  # on the bare module: no DDP hooks, no collective
        dtypes = pytorch_models.compute_dtypes(net.module, x[:a.batch], y[:a.batch], a.precision, loss_fn)
    steps, ts, loss_sum = 0, [], 0.0
    dist.barrier()
    start = time.perf_counter()
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler))
        for s in range(len(order) // a.batch):
            t = time.perf_counter()
            i = order[s * a.batch:(s + 1) * a.batch]
            opt.zero_grad()
            with pytorch_models.autocast(a.precision):  # forward and loss; backward outside
                loss = loss_fn(net(x[i]), y[i])
            loss.backward()
            opt.step()
            loss_sum += loss.item()
            ts.append(time.perf_counter() - t)
            steps += 1
    dist.barrier()
    dt = time.perf_counter() - start
    if rank == 0:
        med = statistics.median(ts)
        print(json.dumps({"framework": "pytorch " + torch.__version__ + " DDP gloo", "model": a.model,
                          "ranks": size, "threads_per_rank": a.threads, "batch_per_rank": a.batch,
                          "precision": a.precision, "compute_dtypes": dtypes, "limit": a.limit, "epochs": a.epochs,
                          "bound": bool(a.bind), "steps": steps, "train_seconds": dt,
                          "train_loss": loss_sum / max(steps, 1),
                          "samples_per_second": steps * a.batch * size / dt,
                          "step_ms_median": 1e3 * med}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
