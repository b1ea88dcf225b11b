#!/usr/bin/env python3
"""Every command, flag and file the README and the user's pages name exists.

  tests/docs/check_docs.py --root . --worker build/worker/reckon-worker \\
      --reckonctl build/ctl/reckonctl

Reads README.md, docs/guide-*.md, docs/reckonctl.md and docs/flags.md. In their
code (indented blocks, fenced blocks, `spans`), each `reckon-worker ...` line's
flags must be in `reckon-worker --helpfull`, each `reckonctl CMD ...` line's in
`reckonctl CMD --help` (reckonctl local and compare take the worker's training
flags too); every flag in docs/flags.md's tables must be the worker's, and
every flag `reckon-worker --help` lists must have a row there; every
repository path named (deploy/..., tests/..., docs/..., and the other top
folders) must be in the tree. Prints each miss with its page and line; exit 1
when there is one.
"""
import argparse
import os
import re
import subprocess
import sys

FOLDERS = ("base", "codec", "cpu", "ctl", "cuda", "dashboards", "deploy", "docs", "examples",
           "model", "proto", "python", "server", "tests", "worker")
FLAG = re.compile(r"--([a-z][a-z0-9-]*[a-z0-9])")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[A-Za-z0-9_./@-]*[A-Za-z0-9_])" % "|".join(FOLDERS))
# Flags of the test-only family, named as a family in the table.
FAMILIES = ("fault-",)


def help_flags(command, asks="--help"):
    out = subprocess.run(command + [asks], capture_output=True, text=True, timeout=60)
    text = out.stdout + out.stderr
    return set(re.findall(r"^\s+--([a-z0-9-]+)", text, re.M))


def code_lines(text):
    """(line number, text) of every piece of code: indented and fenced blocks
    whole, and each `span` of the prose."""
    fenced = False
    for n, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            yield n, line
        else:
            for span in re.findall(r"`([^`]+)`", line):
                yield n, span


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--root", default=".")
    p.add_argument("--worker", required=True)
    p.add_argument("--reckonctl", required=True)
    args = p.parse_args()
    root = args.root
    pages = ["README.md"] + sorted(
        os.path.join("docs", f) for f in os.listdir(os.path.join(root, "docs"))
        if f.startswith("guide-") or f in ("reckonctl.md", "flags.md"))
    # Every flag, the test-only ones of --helpfull too (docs may name them).
    worker = help_flags([args.worker], "--helpfull")
    listed = help_flags([args.worker])
    if len(worker) < 20:
        print(f"reckon-worker --help listed {len(worker)} flags: not a worker?")
        return 1
    ctl = {}

    def ctl_flags(command):
        if command not in ctl:
            ctl[command] = help_flags([args.reckonctl] + command.split())
            if command.split()[0] in ("local", "compare"):
                ctl[command] |= worker
        return ctl[command]

    misses, checked = [], 0
    for page in pages:
        text = open(os.path.join(root, page)).read()
        for n, code in code_lines(text):
            where = f"{page}:{n}"
            for path in PATH.findall(code):
                checked += 1
                if "*" in path or "<" in path or path.startswith("tests/bench/out"):
                    continue
                if not os.path.exists(os.path.join(root, path)):
                    misses.append(f"{where}: {path} is not in the tree")
            # Each command on the line, up to the next one (pipes, &&).
            for part in re.split(r"&&|\|\||;|\|(?!\S*\|)", code):
                words = part.split()
                for i, w in enumerate(words):
                    name = os.path.basename(w)
                    if name == "reckon-worker":
                        known, what = worker, "reckon-worker"
                    elif name == "reckonctl" and i + 1 < len(words) and \
                            re.fullmatch(r"[a-z]+", words[i + 1]):
                        command = words[i + 1]
                        if command in ("bench", "codec") and i + 2 < len(words) and \
                                re.fullmatch(r"[a-z]+", words[i + 2]):
                            command += " " + words[i + 2]
                        known, what = ctl_flags(command), f"reckonctl {command}"
                    else:
                        continue
                    for flag in FLAG.findall(" ".join(words[i + 1:])):
                        checked += 1
                        if flag not in known and flag not in ("help", "helpfull"):
                            misses.append(f"{where}: {what} has no --{flag}")
                    break
        if page == os.path.join("docs", "flags.md"):
            # The reference: each row's flags are the worker's, and every
            # flag --help lists has a row.
            in_table = set()
            for n, line in enumerate(text.split("\n"), 1):
                if not line.startswith("| `--"):
                    continue
                for flag in re.findall(r"`--([a-z0-9-]+\*?)`", line.split("|")[1]):
                    checked += 1
                    in_table.add(flag)
                    if flag.rstrip("-*").endswith(FAMILIES) or \
                            any(flag.startswith(f) for f in FAMILIES):
                        continue
                    if flag not in worker:
                        misses.append(f"{page}:{n}: the flag table's --{flag} is not "
                                      f"reckon-worker's")
            for flag in sorted(listed - in_table - {"flags-file", "version"}):
                misses.append(f"{page}: reckon-worker --help lists --{flag}, the reference has "
                              f"no row for it")
    for miss in misses:
        print("MISSING", miss)
    print(f"checked {checked} commands' flags and paths in {len(pages)} pages: "
          f"{len(misses)} missing")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
