#!/usr/bin/env python3
"""The tree keeps its architecture (docs/architecture.md).

1. No include cycle between folders: each folder's sources include only
   folders below it in LAYERS, never one above or beside-and-back. Tests are
   outside the layering (they may include anything).
2. No function of the libraries and mains is longer than MAX_FUNCTION_LINES
   (the benchmark and operator commands of ctl/ excepted: they are reports
   written top to bottom).

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
    errors = check_layers(root) + check_lengths(root)
    for e in errors:
        print(e)
    if errors:
        return 1
    print(f"folders layered {' < '.join(LAYERS)}; functions within {MAX_FUNCTION_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
