#!/usr/bin/env python3
# docs/training.md "Why momentum diverges there, measured": the residual of a
# reckon checkpoint (worker/checkpoint.h: "RECKONCK", SHA-256, then the
# Checkpoint message; its `residual` field, 11, is float32 per parameter), as
# |r| / tau per weight matrix: the largest, the mean, and the shares above
# 1, 4 and 16 tau.
# Usage: checkpoint_residual.py CHECKPOINT TAU LAYERS   (LAYERS as --layers)
# e.g. reckon-worker --standalone --layers L --activation sigmoid --max-steps 150 \
#          --checkpoint /tmp/ck && checkpoint_residual.py /tmp/ck 0.01 L
import sys
from array import array
def varint(b, i):
    r = s = 0
    while True:
        c = b[i]; i += 1; r |= (c & 0x7f) << s; s += 7
        if c < 0x80: return r, i
data = open(sys.argv[1], 'rb').read()[8 + 32:]
tau = float(sys.argv[2])
layers = [int(x) for x in sys.argv[3].split(',')]
i = 0; fields = {}
while i < len(data):
    key, i = varint(data, i); f, wt = key >> 3, key & 7
    if wt == 0: v, i = varint(data, i)
    elif wt == 2:
        n, i = varint(data, i); v = data[i:i+n]; i += n
    elif wt == 1: v = data[i:i+8]; i += 8
    elif wt == 5: v = data[i:i+4]; i += 4
    fields[f] = v
r = array('f'); r.frombytes(fields[11])
def stats(xs):
    n = len(xs); mx = 0.0; tot = 0.0; g1 = g4 = g16 = 0
    for x in xs:
        a = abs(x) / tau; tot += a
        if a > mx: mx = a
        if a > 1: g1 += 1
        if a > 4: g4 += 1
        if a > 16: g16 += 1
    return f"max {mx:.1f}, mean {tot/n:.3f}, >1 tau {g1/n:.4f}, >4 tau {g4/n:.5f}, >16 tau {g16/n:.6f}"
off = 0
for l in range(len(layers) - 1):
    n = layers[l] * layers[l+1]
    print(f"  W{l+1} {layers[l]}x{layers[l+1]}: {stats(r[off:off+n])}")
    off += n + layers[l+1]
