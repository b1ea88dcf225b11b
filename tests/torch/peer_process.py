"""One PyTorch training process on a reckon cluster (tests/torch/
torch_peers_test.py starts several): a small MLP on its shard of real
Fashion-MNIST, SGD, `reckon.torch.Peer` after every optimizer step, then
the cluster's final agreement. Prints one JSON line: the weight hash, the
steps, the bytes sent and the test accuracy.

    peer_process.py NODE_ID PORT SEED_ADDRESSES SHARD SHARDS [--metrics] [--tls DIR]
                    [--device cuda] [--model bn]

With --tls DIR, mutual TLS with DIR/ca.pem and DIR/NODE_ID.pem, .key
(`reckonctl certs --out DIR`). With --model bn a small CNN with
BatchNorm instead of the MLP (its running statistics are buffers, not
parameters), evaluated in eval mode. With --device cuda the model, its batches
and reckon's replica are on the GPU (reckon built with CUDA).

With --metrics it serves /metrics on a free port and prints, after the
agreement, which reckon_ metrics the scrape had and their values. On
SIGTERM it leaves the loop; finish() then raises reckon.Stopped unless the
cluster had agreed, and the process prints {"stopped": ...} and exits 3.
"""
import gzip
import json
import os
import sys
import urllib.request

import numpy as np
import torch

import reckon
import reckon.torch

# Debian's dataset-fashion-mnist; RECKON_DATA_DIR for a machine without it
# (the device run's pack: tests/gpu/run.sh).
DATA = os.environ.get("RECKON_DATA_DIR", "/usr/share/datasets/fashion-mnist")


def idx(path, offset):
    with gzip.open(f"{DATA}/{path}") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def main():
    node_id, port, seeds, shard, shards = sys.argv[1:6]
    metrics = "--metrics" in sys.argv[6:]
    tls = {}
    if "--tls" in sys.argv[6:]:
        d = sys.argv[sys.argv.index("--tls") + 1]
        tls = {"tls_ca": f"{d}/ca.pem", "tls_cert": f"{d}/{node_id}.pem",
               "tls_key": f"{d}/{node_id}.key"}
    device = "cpu"
    if "--device" in sys.argv[6:]:
        device = sys.argv[sys.argv.index("--device") + 1]
    shard, shards = int(shard), int(shards)
    images = idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 784)[:6000]
    labels = idx("train-labels-idx1-ubyte.gz", 8)[:6000]
    test_images = idx("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 784)[:2000]
    test_labels = idx("t10k-labels-idx1-ubyte.gz", 8)[:2000]
    x = (torch.tensor(images[shard::shards], dtype=torch.float32) / 255.0).to(device)
    y = torch.tensor(labels[shard::shards], dtype=torch.int64).to(device)

    torch.manual_seed(0)  # every peer builds the same start
    if "--model" in sys.argv[6:] and sys.argv[sys.argv.index("--model") + 1] == "bn":
        model = torch.nn.Sequential(
            torch.nn.Unflatten(1, (1, 28, 28)), torch.nn.Conv2d(1, 8, 5), torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
            torch.nn.Linear(8 * 12 * 12, 10))
    else:
        model = torch.nn.Sequential(torch.nn.Linear(784, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 10))
    model.to(device)
    peer = reckon.torch.Peer(model, node_id=node_id, listen=f"127.0.0.1:{port}",
                             peers=[s for s in seeds.split(",") if s], bootstrap=shard == 0,
                             threshold=0.002, failure_timeout_s=2.0, quiesce_timeout_s=120,
                             http_listen="127.0.0.1:0" if metrics else "", **tls)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(2):
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(epoch))
        for b in range(0, len(x) - 63, 64):
            i = order[b:b + 64].to(device)
            opt.zero_grad()
            loss = loss_fn(model(x[i]), y[i])
            loss.backward()
            opt.step()
            peer.step(samples=len(i), loss=loss.item())
            if peer.stopping:
                break
        if peer.stopping:
            break
    try:
        peer.finish()
    except reckon.Stopped as e:
        print(json.dumps({"node_id": node_id, "stopped": str(e), "steps": peer.steps}), flush=True)
        sys.exit(3)
    scraped = {}
    if metrics:
        text = urllib.request.urlopen(f"http://127.0.0.1:{peer.http_port}/metrics").read().decode()
        for line in text.splitlines():
            if line.startswith("reckon_") and " " in line:
                name, value = line.rsplit(" ", 1)
                scraped[name.split("{")[0]] = float(value)
    model.eval()  # BatchNorm: the running statistics, not the batch's
    with torch.no_grad():
        xt = (torch.tensor(test_images, dtype=torch.float32) / 255.0).to(device)
        logits = model(xt)
        accuracy = (logits.argmax(1).cpu().numpy() == test_labels).mean()
        predictions = "".join(str(int(c)) for c in logits.argmax(1).cpu())
        logits_sum = float(logits.double().sum())
    print(json.dumps({"node_id": node_id, "device": str(peer.device),
                      "weight_hash": peer.weight_hash(), "steps": peer.steps,
                      "bytes_sent": peer.bytes_sent, "updates_sent": peer.updates_sent,
                      "params": sum(p.numel() for p in model.parameters()),
                      "accuracy": float(accuracy), "predictions": predictions,
                      "logits_sum": logits_sum, "metrics": scraped}), flush=True)


if __name__ == "__main__":
    main()
