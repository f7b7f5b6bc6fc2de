#!/usr/bin/python3
"""torch_mnist.py: the peer of examples/mnist_cnn in PyTorch (Debian's python3-torch 1.13, CPU):
the same network (Conv2D 32 3x3 + ReLU -> Dense 128 + ReLU -> Dense 10), softmax cross-entropy,
plain SGD, the same batch and thread count, the same IDX files. Prints one JSON line with the
training throughput. Used by bench/cpu_mnist/run.sh.

  /usr/bin/python3 torch_mnist.py --data data/fashion --threads 1 --batch-size 64 --epochs 1
"""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import torch.nn as nn


def read_idx(path):
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            opener = gzip.open if p.endswith(".gz") else open
            with opener(p, "rb") as f:
                data = f.read()
            _, _, kind, ndim = struct.unpack(">BBBB", data[:4])
            dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
            return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)
    raise FileNotFoundError(path + "[.gz]")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data/fashion")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--max-steps", type=int, default=-1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    x_train = torch.from_numpy(read_idx(os.path.join(a.data, "train-images-idx3-ubyte")).copy())
    y_train = torch.from_numpy(read_idx(os.path.join(a.data, "train-labels-idx1-ubyte")).astype(np.int64))
    x_test = torch.from_numpy(read_idx(os.path.join(a.data, "t10k-images-idx3-ubyte")).copy())
    y_test = torch.from_numpy(read_idx(os.path.join(a.data, "t10k-labels-idx1-ubyte")).astype(np.int64))
    x_train = x_train.float().div_(255).unsqueeze(1)
    x_test = x_test.float().div_(255).unsqueeze(1)
    model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Flatten(),
                          nn.Linear(32 * 26 * 26, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    loss_fn = nn.CrossEntropyLoss()
    n = x_train.shape[0]
    steps = n // a.batch_size
    images = 0
    train_seconds = 0.0
    train_cpu_seconds = 0.0
    step_count = 0
    for epoch in range(a.epochs):
        g = torch.Generator().manual_seed(epoch)
        perm = torch.randperm(n, generator=g)
        t0 = time.perf_counter()
        c0 = time.process_time()
        for s in range(steps):
            if 0 <= a.max_steps <= step_count:
                break
            idx = perm[s * a.batch_size:(s + 1) * a.batch_size]
            xb, yb = x_train[idx], y_train[idx]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            images += a.batch_size
            step_count += 1
        train_seconds += time.perf_counter() - t0
        train_cpu_seconds += time.process_time() - c0
    with torch.no_grad():
        correct = sum(int((model(x_test[i:i + 1000]).argmax(1) == y_test[i:i + 1000]).sum())
                      for i in range(0, x_test.shape[0], 1000))
    blas = [kv.split("=", 1)[1] for kv in torch.__config__.show().replace(",", "\n").split()
            if kv.startswith("BLAS_INFO=")]
    print(json.dumps({"peer": "pytorch " + torch.__version__, "threads": a.threads,
                      "batch": a.batch_size, "images": images, "train_seconds": train_seconds,
                      "train_cpu_seconds": train_cpu_seconds,
                      "images_per_second": images / train_seconds,
                      "test_accuracy": correct / x_test.shape[0],
                      "blas": blas[0] if blas else "unknown"}))

if __name__ == "__main__":
    main()
