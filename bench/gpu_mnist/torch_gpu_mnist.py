#!/usr/bin/env python3
"""torch_gpu_mnist.py: the PyTorch peer of `mnist_cnn --device cuda` on the same GPU: the same
network (Conv2D 32 3x3 + ReLU -> Dense 128 + ReLU -> Dense 10), softmax cross-entropy, plain SGD
(lr 0.2), the same batch, the same IDX files, FP32 (TF32 off in cuBLAS and cuDNN, as gpurun's
default). The dataset is put on the GPU once and batches are gathered there, so the comparison
is about the training step, not a DataLoader. Modes: eager, compile (torch.compile of the step).
Prints one JSON line. Used by bench/gpu_mnist/run.sh.

  python3 torch_gpu_mnist.py --data data/fashion --batch-size 256 --epochs 3 --mode eager
"""
import argparse
import gzip
import json
import os
import struct
import sys
import time


def read_idx(path):
    import numpy as np

    for p in (path, path + ".gz"):
        if os.path.exists(p):
            opener = gzip.open if p.endswith(".gz") else open
            with opener(p, "rb") as f:
                data = f.read()
            ndim = data[3]
            dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
            return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)
    raise FileNotFoundError(path + "[.gz]")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data/fashion")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    out = {"peer": "pytorch", "mode": a.mode, "batch": a.batch_size, "epochs": a.epochs}
    try:
        import numpy as np
        import torch
        import torch.nn as nn
    except ImportError as e:
        out["error"] = "PyTorch is not installed: %s" % e
        print(json.dumps(out))
        return 3
    out["torch"] = torch.__version__
    if not torch.cuda.is_available():
        out["error"] = "this PyTorch (%s, CUDA %s) cannot use a GPU here" % (
            torch.__version__, torch.version.cuda)
        print(json.dumps(out))
        return 3
    dev = torch.device("cuda")
    out["device"] = torch.cuda.get_device_name(0)
    out["cudnn"] = torch.backends.cudnn.version()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(a.seed)

    xtr = torch.from_numpy(read_idx(os.path.join(a.data, "train-images-idx3-ubyte")).copy())
    ytr = torch.from_numpy(read_idx(os.path.join(a.data, "train-labels-idx1-ubyte")).astype(np.int64))
    xte = torch.from_numpy(read_idx(os.path.join(a.data, "t10k-images-idx3-ubyte")).copy())
    yte = torch.from_numpy(read_idx(os.path.join(a.data, "t10k-labels-idx1-ubyte")).astype(np.int64))
    xtr = (xtr.to(dev).float() / 255.0).unsqueeze(1)
    ytr = ytr.to(dev)
    xte = (xte.to(dev).float() / 255.0).unsqueeze(1)
    yte = yte.to(dev)

    model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Flatten(),
                          nn.Linear(32 * 26 * 26, 128), nn.ReLU(), nn.Linear(128, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    lossf = nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        return loss

    if a.mode == "compile":
        try:
            step = torch.compile(step)
        except Exception as e:  # noqa: BLE001 - report any reason compile is unavailable
            out["error"] = "torch.compile unavailable: %s" % e
            print(json.dumps(out))
            return 3

    B = a.batch_size
    steps = xtr.shape[0] // B
    per_epoch = []
    try:
        for _ in range(a.epochs):
            perm = torch.randperm(xtr.shape[0], device=dev)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for s in range(steps):
                idx = perm[s * B:(s + 1) * B]
                loss = step(xtr[idx], ytr[idx])
            torch.cuda.synchronize()
            per_epoch.append(time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - e.g. the compiler toolchain is missing
        out["error"] = "%s failed: %s" % (a.mode, str(e).splitlines()[0] if str(e) else repr(e))
        print(json.dumps(out))
        return 3
    with torch.no_grad():
        correct = sum(int((model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum())
                      for i in range(0, xte.shape[0], 1000))
    out.update({"seconds_per_epoch": per_epoch, "steps_per_epoch": steps,
                "final_loss": float(loss), "test_accuracy": correct / xte.shape[0]})
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
