#!/usr/bin/env python3
"""Checks a reckon export with runtimes that are not reckon's.

usage: check_export.py MODEL.onnx MODEL.npz DATA_DIR [--expect-correct N]
                       [--predictions P.npy]

Reads DATA_DIR's test split as raw features: test_x.npy and test_y.npy when
it is a NumPy folder, else Fashion-MNIST's IDX files (gzip or not) as
pixels. Runs the ONNX model in OpenCV's dnn module and the .npz's arrays in
numpy (float64, written here from the .npz's description: standardize,
Gemm per layer, the activation, softmax), and prints one JSON line: each
runtime's correct count, how many predictions the two runtimes share, and
the largest probability difference. Exits 1 when the ONNX file fails the
onnx package's checker, the runtimes disagree on a prediction, or (with
--expect-correct) a count differs from N. With --predictions (reckonctl
predict's output for the test split's features), it must give OpenCV's
predictions, and probabilities within 1e-5 of them.
"""
import gzip
import json
import os
import sys

import cv2
import numpy as np
import onnx


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def find(data_dir, name):
    for candidate in (name, name + ".gz"):
        path = os.path.join(data_dir, candidate)
        if os.path.exists(path):
            return path
    sys.exit("check_export: no %s in %s" % (name, data_dir))


def main():
    args = sys.argv[1:]
    expect = None
    if "--expect-correct" in args:
        at = args.index("--expect-correct")
        expect = int(args[at + 1])
        del args[at:at + 2]
    predictions = None
    if "--predictions" in args:
        at = args.index("--predictions")
        predictions = np.load(args[at + 1])
        del args[at:at + 2]
    onnx_path, npz_path, data_dir = args
    if os.path.exists(os.path.join(data_dir, "test_x.npy")):
        raw = np.load(os.path.join(data_dir, "test_x.npy")).astype(np.float32)
        labels = np.load(os.path.join(data_dir, "test_y.npy")).astype(np.int64)
    else:
        images = read_idx(find(data_dir, "t10k-images-idx3-ubyte"))
        labels = read_idx(find(data_dir, "t10k-labels-idx1-ubyte")).astype(np.int64)
        raw = images.reshape(len(images), -1).astype(np.float32)  # pixels 0..255

    model = onnx.load(onnx_path)
    onnx.checker.check_model(model, full_check=True)
    opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))

    net = cv2.dnn.readNetFromONNX(onnx_path)
    net.setInput(raw)
    onnx_probs = np.asarray(net.forward(), dtype=np.float64)

    z = np.load(npz_path)  # no pickles: plain arrays only
    x = (raw / z["input_divisor"] - z["input_mean"]) * z["input_inv_stddev"]
    x = x.astype(np.float64)
    layers = [int(w) for w in z["layers"]]
    act = str(z["activation"])
    for k in range(1, len(layers)):
        x = x @ z["W%d" % k].astype(np.float64).T + z["b%d" % k]
        if k + 1 < len(layers):
            x = np.maximum(x, 0.0) if act == "relu" else 1.0 / (1.0 + np.exp(-x))
    x = np.exp(x - x.max(axis=1, keepdims=True))
    npz_probs = x / x.sum(axis=1, keepdims=True)

    onnx_pred = onnx_probs.argmax(axis=1)
    npz_pred = npz_probs.argmax(axis=1)
    result = {
        "samples": int(len(labels)),
        "opset": int(opset),
        "onnx_correct": int((onnx_pred == labels).sum()),
        "npz_correct": int((npz_pred == labels).sum()),
        "predictions_shared": int((onnx_pred == npz_pred).sum()),
        "max_probability_difference": float(np.abs(onnx_probs - npz_probs).max()),
        "probabilities_sum_to_one": bool(np.allclose(onnx_probs.sum(axis=1), 1.0, atol=1e-5)),
        "layers": layers,
        "activation": act,
        "weight_hash": str(z["weight_hash"]),
    }
    if predictions is not None:
        result["predict_shares"] = int((predictions.argmax(axis=1) == onnx_pred).sum())
        result["predict_max_difference"] = float(np.abs(predictions - onnx_probs).max())
    print(json.dumps(result))
    ok = (result["predictions_shared"] == result["samples"]
          and (predictions is None or (result["predict_shares"] == result["samples"]
                                       and result["predict_max_difference"] < 1e-5))
          and result["probabilities_sum_to_one"]
          and (expect is None or (result["onnx_correct"] == expect
                                  and result["npz_correct"] == expect)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
