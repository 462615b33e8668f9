#!/usr/bin/env python3
"""scripts/check_layers.py - the include rule of docs/ARCHITECTURE.md, checked.

Folders include only downward:

    include/ <- common/ <- checkpoint/ <- runner/ <- steps/ <- tools/
    gpu/ beside them, including only cairn_errors.h (and itself)

steps/ may use gpu/ (the generate step drives the engine) but never checkpoint/ or runner/: a step
receives its inputs and hands back its output, the runner commits. tools/ is the top: nothing of
the library includes it, and only tools/main.c, the composition root, wires it into the CLI.
examples/ are programs a user copies, so they see only the public header. A few system headers are
fenced too: LMDB stays behind checkpoint/ (and common/mdb.c, steps/bm25*), msgpack and jansson stay
out of gpu/.

Usage: check_layers.py ROOT        check the tree at ROOT; exit 1 listing every violation
       check_layers.py --graph ROOT  print the folder graph: who includes whom, how many times
       check_layers.py --build LAYER ROOT OUT DEPFILE
                                    the build's check of one folder (gpu/ uses it, so that a gpu
                                    file including cairn.h fails the build, not only a test):
                                    writes OUT, a header nothing includes, and DEPFILE, every
                                    file and folder read, so ninja runs it again on any change
       check_layers.py --self-test  plant each kind of violation in a scratch tree and check that
                                    every one is caught (and that a clean tree passes)
"""
import os
import re
import shutil
import sys
import tempfile

# What each folder may include of the project's own folders ("include" is include/, whose
# headers are named bare: "cairn.h").
ALLOWED = {
    "include": {"include"},
    "common": {"include", "common"},
    "checkpoint": {"include", "common", "checkpoint"},
    "runner": {"include", "common", "checkpoint", "runner"},
    "steps": {"include", "common", "gpu", "steps"},
    "tools": {"include", "common", "runner", "steps", "gpu", "tools"},
    "gpu": {"gpu"},  # plus cairn_errors.h alone, below
    "examples": {"include"},
}
# Of include/, gpu/ may have cairn_errors.h only; the public header cairn.h pulls in msgpack.
GPU_PUBLIC = {"cairn_errors.h"}
# System headers a folder must not include (the boundary each library stays behind).
# Matched on the header's name without ".h" or on its folder: "msgpack" fences <msgpack.h> and
# <msgpack/pack.h>.
FORBIDDEN_SYSTEM = {
    "runner": {"lmdb"},
    "tools": {"lmdb"},
    "steps": {"lmdb"},
    "gpu": {"msgpack", "jansson", "lmdb", "curl", "openssl"},
    "include": {"lmdb", "jansson", "curl"},
    "examples": {"lmdb"},
}
# Files allowed past a system fence: the retrieval index owns an LMDB environment of its own.
SYSTEM_EXCEPTIONS = {("steps", "lmdb"): re.compile(r"steps/bm25[^/]*$")}
SOURCES = (".c", ".h", ".cu", ".cuh", ".cpp", ".hpp")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')


def owner_of_quoted(rel_dir, name, root):
    """The folder a quoted include resolves to, or None for a file outside the layers."""
    first = name.split("/", 1)[0]
    if "/" in name and first in ALLOWED:
        return first
    if "/" not in name:
        if os.path.exists(os.path.join(root, "include", name)):
            return "include"
        # a bare name next to the includer (gpu/emu style) belongs to the includer's folder
        return rel_dir.split("/", 1)[0]
    return None


def includes(root, layers=ALLOWED, read=None):
    """(layer, path relative to root, its folder, line number, '<' or '"', included name) for
    every include of the layers' files; `read`, when a list, collects every file and folder."""
    for layer in layers:
        base = os.path.join(root, layer)
        if not os.path.isdir(base):
            continue
        for dirpath, dirs, files in os.walk(base):
            dirs.sort()
            if read is not None:
                read.append(dirpath)
            for f in sorted(files):
                if not f.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                if read is not None:
                    read.append(path)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for lineno, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if m:
                            yield layer, rel, dirpath, lineno, m.group(1), m.group(2)


def check(root, layers=ALLOWED, read=None):
    problems = []
    for layer, rel, dirpath, lineno, kind, name in includes(root, layers, read):
        where = f"{rel}:{lineno}: "
        if kind == "<":
            lib = os.path.splitext(name.split("/", 1)[0])[0]
            exc = SYSTEM_EXCEPTIONS.get((layer, lib))
            if lib in FORBIDDEN_SYSTEM.get(layer, set()) and not (exc and exc.search(rel)):
                problems.append(where + f"{layer}/ must not include <{name}>")
            continue
        target = owner_of_quoted(os.path.relpath(dirpath, root), name, root)
        if ".." in name.split("/"):
            problems.append(where + f'"{name}": includes name their folder, never "../"')
            continue
        if target is None:
            continue
        if layer == "gpu" and target == "include":
            if name not in GPU_PUBLIC:
                problems.append(where + f'gpu/ may include only cairn_errors.h, not "{name}"')
        elif target not in ALLOWED[layer]:
            problems.append(
                where + f'{layer}/ includes "{name}" of {target}/, which is not below it'
            )
    return problems


def self_test():
    """Every kind of violation, planted one at a time in a copy of a tiny clean tree, is caught."""
    clean = {
        "include/cairn.h": '#include "cairn_errors.h"\n',
        "include/cairn_errors.h": "",
        "common/json.c": '#include "cairn.h"\n#include "common/json.h"\n',
        "checkpoint/store.c": '#include "common/mdb.h"\n#include <lmdb.h>\n',
        "runner/runner.c": '#include "checkpoint/store.h"\n#include "common/json.h"\n',
        "steps/llm.c": '#include "gpu/engine.h"\n#include "common/json.h"\n',
        "steps/bm25.c": "#include <lmdb.h>\n",
        "tools/main.c": '#include "runner/cli.h"\n#include "steps/pipeline.h"\n#include "tools/tools.h"\n',
        "gpu/model.c": '#include "cairn_errors.h"\n#include "gpu/model.h"\n',
        "examples/ledger/ledger.c": '#include "cairn.h"\n',
    }
    planted = [
        ("runner/graph.c", '#include "steps/pipeline.h"\n', "runner/ includes"),
        ("runner/cli.c", '#include "tools/tools.h"\n', "runner/ includes"),
        ("checkpoint/map.c", '#include "runner/internal.h"\n', "checkpoint/ includes"),
        ("common/str.c", '#include "checkpoint/store.h"\n', "common/ includes"),
        ("steps/notify.c", '#include "runner/internal.h"\n', "steps/ includes"),
        ("steps/notify.c", '#include "checkpoint/store.h"\n', "steps/ includes"),
        ("steps/llm2.c", '#include "tools/tools.h"\n', "steps/ includes"),
        ("gpu/chat.c", '#include "cairn.h"\n', "gpu/ may include only"),
        ("gpu/chat.c", '#include "common/utf8.h"\n', "gpu/ includes"),
        ("gpu/gguf.c", "#include <msgpack.h>\n", "gpu/ must not include"),
        ("gpu/cuda/x.cuh", "#include <openssl/sha.h>\n", "gpu/ must not include"),
        ("gpu/cpu/y.c", '#include "../../include/cairn.h"\n', "never"),
        ("runner/exec.c", "#include <lmdb.h>\n", "runner/ must not include"),
        ("examples/ledger/x.c", '#include "runner/internal.h"\n', "examples/ includes"),
        ("include/cairn.h", '#include "common/json.h"\n', "include/ includes"),
    ]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        def build(extra=None):
            shutil.rmtree(tmp)
            os.mkdir(tmp)
            files = dict(clean)
            if extra:
                path, text = extra
                files[path] = files.get(path, "") + text
            for path, text in files.items():
                full = os.path.join(tmp, path)
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "w") as fh:
                    fh.write(text)

        n = 1
        build()
        found = check(tmp)
        print(("ok" if not found else "not ok") + f" {n} - a clean tree passes")
        failures += bool(found)
        for path, text, expect in planted:
            n += 1
            build((path, text))
            found = check(tmp)
            hit = any(expect in p and p.startswith(path) for p in found)
            print(("ok" if hit else "not ok") + f" {n} - caught: {path} {text.strip()}")
            if not hit:
                failures += 1
                print("#   got: " + "; ".join(found or ["nothing"]))
    return n, failures


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        n, failures = self_test()
        print(f"1..{n}")
        return 1 if failures else 0
    if len(sys.argv) == 3 and sys.argv[1] == "--graph":
        edges = {}
        for layer, _, dirpath, _, kind, name in includes(sys.argv[2]):
            target = owner_of_quoted(os.path.relpath(dirpath, sys.argv[2]), name, sys.argv[2])
            if kind == '"' and target and target != layer:
                edges[(layer, target)] = edges.get((layer, target), 0) + 1
        for (a, b), n in sorted(edges.items()):
            print(f"{a}/ -> {b}/ ({n})")
        return 0
    if len(sys.argv) == 6 and sys.argv[1] == "--build":
        layer, root, out, dep = sys.argv[2:]
        read = []
        problems = check(root, [layer], read)
        if problems:
            sys.stderr.write(f"{layer}/ includes against the layering (docs/ARCHITECTURE.md):\n")
            for p in problems:
                sys.stderr.write(f"  {p}\n")
            return 1
        with open(out, "w") as fh:
            fh.write(f"/* GENERATED by scripts/check_layers.py: {layer}/'s include rule held for "
                     f"{len(read)} files and folders. Included by nothing. */\n")
        with open(dep, "w") as fh:
            fh.write(out.replace(" ", "\\ ") + ": " + " ".join(p.replace(" ", "\\ ") for p in read) + "\n")
        return 0
    if len(sys.argv) != 2:
        print(__doc__.split("\n\n")[-1], file=sys.stderr)
        return 64
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} include(s) against the layering (docs/ARCHITECTURE.md)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
