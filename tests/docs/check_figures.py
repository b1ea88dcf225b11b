#!/usr/bin/env python3
"""Every kept figures file prints again, and docs/benchmarks.md names it.

  tests/docs/check_figures.py --root . --reckonctl build/ctl/reckonctl

docs/benchmarks.md promises that each figure it keeps as a bench's JSON is in
docs/figures/ and that `reckonctl bench show --from FILE` prints it again as
tables (issue 57 item 4). This checks both ways: every docs/figures/*.json,
*.jsonl and *.csv file (`reckonctl compare --csv`) prints (exit 0, a header and a row at least) and is named by the
page's index table or, for figures that are not speed figures (the attack
and chaos soaks), by another page of docs/; every file the index names
exists. A miss is printed with what is wrong; exit 1 when there is one.
"""
import argparse
import os
import re
import subprocess
import sys

INDEX_HEADER = "| file | section | command | machine, date |"
KEPT = (".json", ".jsonl", ".csv")


def expand(token, previous):
    """The names one backticked index token stands for: `a-{x,y}.json` is two
    files; `-fused.json` after `stem.json` is stem-fused.json."""
    if token.startswith("-") and previous:
        token = previous.rsplit(".", 1)[0] + token
    braces = re.match(r"^(.*)\{([^}]*)\}(.*)$", token)
    if braces:
        return [braces.group(1) + part + braces.group(3) for part in braces.group(2).split(",")]
    return [token]


def index_names(page):
    """The file names in the first column of the page's index table."""
    lines = page.split("\n")
    if INDEX_HEADER not in lines:
        return None
    names = []
    for line in lines[lines.index(INDEX_HEADER) + 2:]:
        if not line.startswith("|"):
            break
        previous = None
        for token in re.findall(r"`([^`]+)`", line.split("|")[1]):
            for name in expand(token, previous):
                names.append(name)
                previous = name
    return names


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--root", default=".")
    p.add_argument("--reckonctl", required=True)
    args = p.parse_args()
    figures = os.path.join(args.root, "docs", "figures")
    with open(os.path.join(args.root, "docs", "benchmarks.md")) as f:
        named = index_names(f.read())
    if named is None:
        print("docs/benchmarks.md: no index table (its header line: %s)" % INDEX_HEADER)
        return 1
    elsewhere = ""
    for page in sorted(os.listdir(os.path.join(args.root, "docs"))):
        if page.endswith(".md") and page != "benchmarks.md":
            with open(os.path.join(args.root, "docs", page)) as f:
                elsewhere += f.read()
    kept = sorted(f for f in os.listdir(figures) if f.endswith(KEPT))
    misses = []
    for name in named:
        if name.endswith(KEPT) and name not in kept:
            misses.append("docs/benchmarks.md's index names %s, not in docs/figures/" % name)
    for name in kept:
        if name not in named and "figures/" + name not in elsewhere:
            misses.append("docs/figures/%s: no row in docs/benchmarks.md's index, and no other"
                          " page of docs/ names it" % name)
        out = subprocess.run([args.reckonctl, "bench", "show", "--from", os.path.join(figures, name)],
                             capture_output=True, text=True, timeout=60)
        lines = [l for l in out.stdout.split("\n") if l.strip()]
        if out.returncode != 0 or len(lines) < 2:
            misses.append("docs/figures/%s: reckonctl bench show exits %d with %d lines: %s" %
                          (name, out.returncode, len(lines), (out.stderr or out.stdout).strip()[:200]))
    for miss in misses:
        print(miss)
    print("%d figures files, %d index names, %d misses" % (len(kept), len(named), len(misses)))
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
