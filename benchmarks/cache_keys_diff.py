"""Why one build's compiles missed another's object cache: the two builds' key records
(logs/<variant>.cache-keys.json, written by every cached build) compared step by step.

    .venv/bin/python benchmarks/cache_keys_diff.py A.cache-keys.json B.cache-keys.json

A step's key is its command line (without its output, and the folders that move between
checkouts named by name: kernel_matrix/building/portable.py), its compilers' path and
--version text, and the compiler environment variables (kernel_matrix/building/objcache.py). For each
step of both records whose keys differ, one line names the part that differs: the argv
elements only one side has, the compiler lines that differ, the variables that differ.
Exit 0 when every shared step has the same key, 1 otherwise (made for two machines'
records, such as the H200 sweep driver's `wait` brings back)."""

from __future__ import annotations

import collections
import difflib
import itertools
import json
import sys
from pathlib import Path
from typing import Any

from kernel_matrix.building.portable import Places, shown


def load(path: Path) -> dict[str, dict[str, Any]]:
    records = json.loads(path.read_text())
    return {record["step"]: record for record in records}


def keyed_argv(record: dict[str, Any]) -> list[str]:
    """A record's command line as its key reads it, each named folder shown as <name>
    (records written before folders were named have none)."""
    places = Places({Path(folder): name for folder, name in record.get("folders", [])})
    return [shown(arg) for arg in places.command(record["argv"])]


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What differs between two records of one step, a phrase each."""
    found = []
    argv_a, argv_b = keyed_argv(a), keyed_argv(b)
    if argv_a != argv_b:
        words_a, words_b = collections.Counter(argv_a), collections.Counter(argv_b)
        only_a, only_b = sorted((words_a - words_b).elements()), sorted((words_b - words_a).elements())
        found.append(f"argv: only A {only_a}, only B {only_b}" if only_a or only_b else "argv: same words, other order")
    for index, (x, y) in enumerate(itertools.zip_longest(a["compilers"], b["compilers"])):
        if x != y:
            lines = list(difflib.unified_diff((x or "").splitlines(), (y or "").splitlines(), lineterm="", n=0))
            found.append(
                f"compiler {index}: "
                + " | ".join(ln for ln in lines if ln[:1] in "+-" and ln[:3] not in ("+++", "---"))
            )
    for name in sorted(set(a["environment"]) | set(b["environment"])):
        if a["environment"].get(name) != b["environment"].get(name):
            found.append(f"${name}: A {a['environment'].get(name)!r}, B {b['environment'].get(name)!r}")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python benchmarks/cache_keys_diff.py A.cache-keys.json B.cache-keys.json", file=sys.stderr)
        return 2
    a, b = load(Path(argv[0])), load(Path(argv[1]))
    missed = 0
    for step in sorted(set(a) & set(b)):
        if a[step]["key"] == b[step]["key"]:
            continue
        missed += 1
        print(f"{step}: " + "; ".join(differences(a[step], b[step]) or ["the same parts (another key format)"]))
    for step in sorted(set(a) ^ set(b)):
        print(f"{step}: only in {'A' if step in a else 'B'}")
    print(f"{len(set(a) & set(b)) - missed} of {len(set(a) & set(b))} shared steps have the same key")
    if not missed:
        # The cache's second look: an entry hits only if every file it lists has the same hash.
        print("(same keys: a miss then comes from a file the compile read, whose hash the entry lists)")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
