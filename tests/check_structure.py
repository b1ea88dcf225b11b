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
4. No source file outside tests is longer than MAX_FILE_LINES, and no class
   or struct declares more than MAX_CLASS_METHODS member functions in its
   body (constructors, operators and inline ones included; deleted ones,
   nested classes' and friends not).
5. Every header outside tests opens with a comment that says which threads
   may call it (the word "thread" in the comment before its include guard).

Fails listing every violation. Usage: check_structure.py SOURCE_DIR
"""
import os
import re
import sys

# Lowest first. A folder may include itself and folders listed before it.
LAYERS = ["proto", "base", "codec", "model", "cpu", "cuda", "server", "worker", "python", "ctl"]
MAX_FUNCTION_LINES = 80
MAX_FILE_LINES = 600
MAX_CLASS_METHODS = 40
SIZE_CHECKED = LAYERS  # every folder of the libraries, mains and ctl
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


def source_texts(root, folders, suffixes=(".cc", ".h", ".cu", ".cuh")):
    """(path relative to root, text) of every source in `folders` whose name
    ends with one of `suffixes`."""
    for folder in folders:
        for rel, path in sources(root, folder):
            if rel.endswith(suffixes):
                with open(path, encoding="utf-8") as f:
                    yield rel, f.read()


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
    for rel, text in source_texts(root, LENGTH_CHECKED, (".cc", ".cu")):
        lines = text.split("\n")
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


def code_only(text):
    """`text` without comments, string and character literals, or
    preprocessor lines (their places kept as spaces)."""
    text = re.sub(r"^[ \t]*#.*?(?<!\\)$", "", text, flags=re.M | re.S)
    token = re.compile(r'//[^\n]*|/\*.*?\*/|R"(\w*)\(.*?\)\1"|"(?:\\.|[^"\\\n])*"|'
                       r"'(?:\\.|[^'\\\n])*'", re.S)
    return token.sub(lambda m: '""' if m.group(0)[0] in "R\"'" else " ", text)


CLASS_HEAD = re.compile(r"(?<!enum )\b(?:class|struct)\s+(?:\w+\s+)*?(\w+)\s*(?:final\s*)?"
                        r"(?::[^;{()]*)?\{")
NESTED = re.compile(r"^\s*(?:template\s*<.*>\s*)?(?:class|struct|union|enum)\b")
NOT_A_METHOD = re.compile(r"^\s*(?:using|friend|typedef|static_assert|template\s*<[^>]*>\s*friend)\b")


def member_functions(body):
    """The member functions declared directly in a class body (the text
    between its braces, code_only): each declaration at the body's depth,
    its inline definition and nested types skipped."""
    count, statement, depth, i = 0, "", 0, 0
    while i < len(body):
        c = body[i]
        if depth == 0 and c in ";{":
            head = re.sub(r"\b(?:public|private|protected)\s*:(?!:)", " ", statement)
            head = re.sub(r"\bABSL_\w+(?:\([^()]*\))?|\[\[[^\]]*\]\]", " ", head)
            head = re.sub(r"\boperator\s*(?:\(\s*\)|\[\s*\]|[^\w\s(]+)", "operator_", head)
            while True:  # template arguments, whatever they hold
                shorter = re.sub(r"<[^<>;{}]*>", "", head)
                if shorter == head:
                    break
                head = shorter
            paren, equals = head.find("("), head.find("=")
            is_method = (re.search(r"[\w~]\s*\(", head) is not None and
                         (equals < 0 or paren < equals) and not NOT_A_METHOD.match(head) and
                         not NESTED.match(head) and not re.search(r"=\s*delete\s*$", head))
            count += is_method
            statement = ""
            if c == "{":
                depth = 1
        elif depth > 0:
            depth += {"{": 1, "}": -1}.get(c, 0)
        else:
            statement += c
        i += 1
    return count


def class_bodies(text):
    for m in CLASS_HEAD.finditer(text):
        start, depth = m.end(), 1
        for j in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                yield m.group(1), text.count("\n", 0, m.start()) + 1, text[start:j]
                break


def check_header_contracts(root):
    errors = []
    for rel, text in source_texts(root, SIZE_CHECKED, (".h", ".cuh")):
        head = re.split(r"^#(?:ifndef|pragma)", text, maxsplit=1, flags=re.M)[0]
        if not re.search(r"thread", head, re.I):
            errors.append(f"{rel}: its opening comment says nothing of threads: state who "
                          f"may call it (\"Threads: ...\") and its errors")
    return errors


def check_sizes(root):
    errors = []
    for rel, text in source_texts(root, SIZE_CHECKED):
        lines = text.count("\n")
        if lines > MAX_FILE_LINES:
            errors.append(f"{rel}: {lines} lines (at most {MAX_FILE_LINES}): split it by concern")
        for name, line, body in class_bodies(code_only(text)):
            n = member_functions(body)
            if n > MAX_CLASS_METHODS:
                errors.append(f"{rel}:{line}: {name} declares {n} member functions (at most "
                              f"{MAX_CLASS_METHODS}): split it by who calls it")
    return errors


def main(root):
    errors = (check_layers(root) + check_server_layers(root) + check_lengths(root) +
              check_sizes(root) + check_header_contracts(root))
    for e in errors:
        print(e)
    if errors:
        return 1
    print(f"folders layered {' < '.join(LAYERS)}; server/ in layers "
          f"{', '.join(['gossip'] + list(SERVER_LAYERS))}; functions within "
          f"{MAX_FUNCTION_LINES} lines; files within {MAX_FILE_LINES} lines, classes within "
          f"{MAX_CLASS_METHODS} member functions; every header states its threads")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
