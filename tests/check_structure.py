#!/usr/bin/env python3
"""The tree keeps its architecture (docs/architecture.md).

1. No include cycle between folders: each folder's sources include only
   folders below it in LAYERS, never one above or beside-and-back. Tests are
   outside the layering (they may include anything).
2. No function of the libraries and mains is longer than MAX_FUNCTION_LINES
   (the benchmark and operator commands of ctl/ excepted: they are reports
   written top to bottom).
3. server/ is in layers (server/CMakeLists.txt, one library each): each file
   includes only server/ headers of its own layer and those it builds on,
   and only the transport sees gRPC, only the endpoint sees Beast and
   Prometheus, only security sees OpenSSL.

Fails listing every violation. Usage: check_structure.py SOURCE_DIR
"""
import os
import re
import sys

# Lowest first. A folder may include itself and folders listed before it.
LAYERS = ["proto", "base", "codec", "model", "cpu", "cuda", "server", "worker", "python", "ctl"]
MAX_FUNCTION_LINES = 80
LENGTH_CHECKED = ["base", "codec", "model", "cpu", "cuda", "server", "worker", "python"]
# Functions over the limit, each with why it stays whole.
LONG_FUNCTION_EXCEPTIONS = {
    ("codec/rice.cc", "DecodeRice"): "the decoder's hot loop, kept in one piece to vectorize",
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([\w.-]+)/')
# server/'s layers: the files of each (by stem), what each builds on, and the
# outside headers only it may include.
SERVER_LAYERS = {
    "security": ({"tls", "update_signature"}, {"gossip"}, ("openssl/",)),
    "transport": ({"grpc_clients", "grpc_credentials", "grpc_streams", "grpc_transport",
                   "snapshot_writer"}, {"security", "gossip"}, ("grpcpp/", "grpc/",
                                                                "proto/reckon.grpc.pb.h")),
    "http": ({"http_endpoint", "node_metrics"}, {"gossip"},
             ("prometheus/", "boost/")),
    "testing": ({"inproc_link"}, {"gossip"}, ()),
}
GOSSIP_BUILDS_ON = set()  # every other server/ file is the gossip layer
ANY_INCLUDE = re.compile(r'^\s*#\s*include\s+[<"]([^>"]+)[>"]')
# A function definition starts at column 0 with a name and an opening paren
# and ends at the first column-0 closing brace.
DEFINITION = re.compile(r"^(?!namespace|struct|class|enum|using|template|ABSL_FLAG)[A-Za-z_].*?"
                        r"([\w:~]+)\(")


def sources(root, folder):
    for dirpath, _, filenames in os.walk(os.path.join(root, folder)):
        for f in sorted(filenames):
            if re.search(r"\.(cc|h|cu|cuh)$", f):
                path = os.path.join(dirpath, f)
                yield os.path.relpath(path, root), path


def check_layers(root):
    errors = []
    rank = {folder: i for i, folder in enumerate(LAYERS)}
    for folder in LAYERS:
        for rel, path in sources(root, folder):
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if m and m.group(1) in rank and rank[m.group(1)] > rank[folder]:
                        errors.append(f"{rel}:{number}: {folder}/ includes {m.group(1)}/, "
                                      f"a folder above it ({' < '.join(LAYERS)})")
    return errors


def server_layer(stem):
    for layer, (stems, _, _) in SERVER_LAYERS.items():
        if stem in stems:
            return layer
    return "gossip"


def check_server_layers(root):
    errors = []
    for rel, path in sources(root, "server"):
        stem = os.path.splitext(os.path.basename(rel))[0]
        layer = server_layer(stem)
        builds_on = SERVER_LAYERS[layer][1] if layer != "gossip" else GOSSIP_BUILDS_ON
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                m = ANY_INCLUDE.match(line)
                if not m:
                    continue
                included = m.group(1)
                if included.startswith("server/"):
                    theirs = server_layer(os.path.splitext(os.path.basename(included))[0])
                    if theirs != layer and theirs not in builds_on:
                        errors.append(f"{rel}:{number}: server/ layer {layer} includes {included} "
                                      f"of layer {theirs} (server/CMakeLists.txt)")
                    continue
                for other, (_, _, owned) in SERVER_LAYERS.items():
                    if other != layer and included.startswith(owned):
                        errors.append(f"{rel}:{number}: server/ layer {layer} includes "
                                      f"{included}: only the {other} layer may")
    return errors


def check_lengths(root):
    errors = []
    for folder in LENGTH_CHECKED:
        for rel, path in sources(root, folder):
            if not rel.endswith((".cc", ".cu")):
                continue
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
            start = None
            for i, line in enumerate(lines):
                if start is None:
                    m = DEFINITION.match(line)
                    if m and not line.rstrip().endswith((";", "}")):
                        start = (i, m.group(1).split("::")[-1])
                elif line.startswith("}"):
                    length = i - start[0] + 1
                    if (length > MAX_FUNCTION_LINES and
                            (rel, start[1]) not in LONG_FUNCTION_EXCEPTIONS):
                        errors.append(f"{rel}:{start[0] + 1}: {start[1]} is {length} lines "
                                      f"(at most {MAX_FUNCTION_LINES}): split it into named steps")
                    start = None
                elif line and not line[0].isspace() and line.rstrip().endswith(";"):
                    start = None  # a declaration spread over lines
    return errors


def main(root):
    errors = check_layers(root) + check_server_layers(root) + check_lengths(root)
    for e in errors:
        print(e)
    if errors:
        return 1
    print(f"folders layered {' < '.join(LAYERS)}; server/ in layers "
          f"{', '.join(['gossip'] + list(SERVER_LAYERS))}; functions within "
          f"{MAX_FUNCTION_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
