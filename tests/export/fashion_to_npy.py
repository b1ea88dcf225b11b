#!/usr/bin/env python3
"""Fashion-MNIST's IDX files as a NumPy folder reckon-worker --data-dir takes.

usage: fashion_to_npy.py [OUT_DIR] [SRC_DIR]

Writes OUT_DIR (default fashion-npy)/train_x.npy [60000, 784] uint8,
train_y.npy, test_x.npy [10000, 784], test_y.npy from SRC_DIR (default
Debian's /usr/share/datasets/fashion-mnist). docs/guide-worker.md "Using the trained
model" runs it; so does the test ReckonctlExport.TheReadmeExampleRuns.
"""
import gzip
import os
import sys

import numpy as np


def idx(src, name):
    data = gzip.open(os.path.join(src, name + ".gz")).read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "fashion-npy"
    src = sys.argv[2] if len(sys.argv) > 2 else "/usr/share/datasets/fashion-mnist"
    os.makedirs(out, exist_ok=True)
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = idx(src, prefix + "-images-idx3-ubyte")
        np.save(os.path.join(out, split + "_x.npy"), images.reshape(len(images), -1))
        np.save(os.path.join(out, split + "_y.npy"), idx(src, prefix + "-labels-idx1-ubyte"))


if __name__ == "__main__":
    main()
