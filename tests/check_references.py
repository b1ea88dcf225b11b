#!/usr/bin/env python3
"""Every file a comment or a doc names must exist in the tree.

Scans sources and docs for names like `server/link.h`, `docs/wire.md` or a
bare `fault_link.h` (outside #include lines) and fails, listing each one that
does not resolve: a reference to a file that was renamed, removed, or never
was in the repository. Usage: check_references.py SOURCE_DIR
"""
import os
import re
import sys

PROJECT_DIRS = ("base/", "codec/", "model/", "cpu/", "server/", "worker/", "cuda/", "ctl/", "tests/",
                "docs/", "proto/",
                "deploy/", "dashboards/", ".ci/")
SCANNED = re.compile(r"\.(cc|h|cu|cuh|proto|md|txt|sh|py)$|CMakeLists\.txt$")
NAME = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w-]+\.(?:h|cc|cu|cuh|md|proto|sh|py))(?![\w])")
# Names that are not files of this tree: system and library headers seen in
# prose, and example file names in usage text.
OUTSIDE = re.compile(r"^(absl|grpcpp|grpc|google|openssl|cub|gtest|linux|sys|netinet|arpa)/|"
                     r"^doc/connection-backoff\.md$")
# Headers of other projects named bare in prose, and example names in usage.
EXTERNAL = {"cblas.h", "cublas_v2.h", "cuda_runtime.h", "zlib.h", "zstd.h", "f.cc",
            "train.py"}


def main(root):
    files, basenames = set(), set()
    for dirpath, dirnames, filenames in os.walk(root):
        # Build outputs and npm's installs (gitignored) are not ours.
        dirnames[:] = [d for d in dirnames if d not in (".git", "node_modules")
                       and not d.startswith("build")]
        for f in filenames:
            rel = os.path.relpath(os.path.join(dirpath, f), root)
            files.add(rel)
            basenames.add(f)
    missing = {}
    for rel in sorted(files):
        if not SCANNED.search(rel):
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                if line.lstrip().startswith("#include"):
                    continue
                for match in NAME.finditer(line):
                    name = match.group(1)
                    if OUTSIDE.search(name) or name in files:
                        continue
                    if "/" in name:
                        if not name.startswith(PROJECT_DIRS):
                            continue  # not a path of this tree (an example, a URL part)
                        if any(f.endswith("/" + name) or f == name for f in files):
                            continue
                    elif name in basenames or name in EXTERNAL:
                        continue
                    missing.setdefault(name, []).append(f"{rel}:{number}")
    for name, where in sorted(missing.items()):
        print(f"{name}: named in {', '.join(where[:5])} but not in the tree")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
