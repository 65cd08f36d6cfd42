"""The compiled-object cache: real gcc compiles of small files, and a real
variant rebuild after the CUDA file changed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ONE_KERNEL_TEST, REPO, kernel_matrix

from kernel_matrix.building.compile import Step, run_steps
from kernel_matrix.building.objcache import MAX_RECIPES, ObjectCache, parse_depfile
from kernel_matrix.building.portable import Places, shown
from kernel_matrix.building.recipe import recipe_digest

CXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(CXX is None, reason="needs g++")


def test_parse_depfile_reads_continuations_escaped_spaces_and_relative_paths(tmp_path):
    text = "out.o: /a/src.cpp \\\n /a/b.h /a/with\\ space.h\\\n /a/b.h include/c.h\n"
    expected = ["/a/src.cpp", "/a/b.h", "/a/with space.h", "/work/include/c.h"]
    assert parse_depfile(text, base=Path("/work")) == sorted(Path(p) for p in expected)


def test_a_file_changed_during_the_compile_is_not_recorded(tmp_path):
    (tmp_path / "src.cpp").write_text("int value() { return 3; }\n")
    cache = ObjectCache(tmp_path / "cache")
    output, depfile = tmp_path / "x.o", tmp_path / "x.o.d"
    argv = [CXX, "-c", str(tmp_path / "src.cpp"), "-o", str(output)]
    subprocess.run([*argv, "-MD", "-MF", str(depfile)], check=True)
    # The source is newer than the compile's start: it may not be what was compiled.
    cache.store(argv, output, [CXX], depfile, cwd=tmp_path, started=time.time() - 3600)
    assert not cache.fetch(argv, output, [CXX])
    cache.store(argv, output, [CXX], depfile, cwd=tmp_path, started=time.time() + 1)
    assert cache.fetch(argv, output, [CXX])


def _compile(tmp_path: Path, cache: ObjectCache, name: str) -> bool:
    """Compile src.cpp into <name>.o through the cache; True if it came from the cache."""
    output = tmp_path / f"{name}.o"
    argv = [CXX, "-O1", "-c", str(tmp_path / "src.cpp"), "-I", str(tmp_path), "-o", str(output)]
    link = Step("link", [CXX, "-shared", str(output), "-o", str(tmp_path / f"{name}.so")], tmp_path / f"{name}.so")
    seen = {}
    run_steps(
        [Step("compile", argv, output, compilers=(CXX,))],
        link,
        cwd=tmp_path,
        cache=cache,
        on_done=lambda step, cached: seen.setdefault(step.label, cached),
    )
    assert (tmp_path / f"{name}.so").is_file()
    return seen["compile"]


def test_a_hit_needs_the_same_source_and_headers(tmp_path):
    (tmp_path / "value.h").write_text("#define VALUE 1\n")
    (tmp_path / "src.cpp").write_text('#include "value.h"\nint value() { return VALUE; }\n')
    cache = ObjectCache(tmp_path / "cache")
    assert _compile(tmp_path, cache, "first") is False
    assert _compile(tmp_path, cache, "second") is True  # other output path, same compile
    assert (tmp_path / "second.o").read_bytes() == (tmp_path / "first.o").read_bytes()

    (tmp_path / "value.h").write_text("#define VALUE 2\n")  # only a header changes
    assert _compile(tmp_path, ObjectCache(tmp_path / "cache"), "third") is False
    assert (tmp_path / "third.o").read_bytes() != (tmp_path / "first.o").read_bytes()

    # Back to the first header: both objects are kept (one per set of inputs,
    # as four torch versions' builder images put different headers at one path).
    (tmp_path / "value.h").write_text("#define VALUE 1\n")
    assert _compile(tmp_path, ObjectCache(tmp_path / "cache"), "fourth") is True
    assert (tmp_path / "fourth.o").read_bytes() == (tmp_path / "first.o").read_bytes()
    (tmp_path / "value.h").write_text("#define VALUE 2\n")
    assert _compile(tmp_path, ObjectCache(tmp_path / "cache"), "fifth") is True
    assert (tmp_path / "fifth.o").read_bytes() == (tmp_path / "third.o").read_bytes()

    (tmp_path / "src.cpp").write_text('#include "value.h"\nint value() { return VALUE + 1; }\n')
    assert _compile(tmp_path, ObjectCache(tmp_path / "cache"), "sixth") is False


def test_a_broken_cache_entry_compiles_again(tmp_path):
    (tmp_path / "src.cpp").write_text("int value() { return 3; }\n")
    cache = ObjectCache(tmp_path / "cache")
    _compile(tmp_path, cache, "first")
    for manifest in (tmp_path / "cache" / "manifests").rglob("*.json"):
        for entry in json.loads(manifest.read_text()):
            (tmp_path / "cache" / "objects" / entry["object"]).unlink()
    assert _compile(tmp_path, ObjectCache(tmp_path / "cache"), "second") is False
    assert (tmp_path / "second.o").read_bytes() == (tmp_path / "first.o").read_bytes()


def test_places_name_a_folder_only_where_a_path_starts_and_only_the_whole_folder():
    places = Places({Path("/x/kernel"): "relu", Path("/x/kernel_matrix"): "kernel_matrix"})
    relu, ours = "\0" + "0:relu\0", "\0" + "1:kernel_matrix\0"
    assert places.argument("-I/x/kernel/csrc") == f"-I{relu}/csrc"
    assert places.argument("/x/kernel/a.cpp") == f"{relu}/a.cpp"
    assert places.argument("-ffile-prefix-map=/x/kernel=relu") == f"-ffile-prefix-map={relu}=relu"
    assert places.argument("-Xcompiler=-ffile-prefix-map=/x/kernel_matrix=kernel_matrix") == (
        f"-Xcompiler=-ffile-prefix-map={ours}=kernel_matrix"
    )
    # Not the folder: a longer name beside it, the folder inside another path, a relative path.
    for other in ("-I/x/kernel2/csrc", "/a/x/kernel/a.cpp", "-include/a/x/kernel/h.h", "x/kernel/a.cpp"):
        assert places.argument(other) == other
    # PathMap orders prefix maps by the folders' lengths, which differ between checkouts: the key does not.
    short = Places({Path("/k"): "relu", Path("/x/kernel_matrix"): "kernel_matrix"})
    maps = ["-ffile-prefix-map=/x/kernel_matrix=kernel_matrix", "-ffile-prefix-map=/x/kernel=relu"]
    assert places.command(["g++", *maps]) == short.command(
        ["g++", *reversed([m.replace("/x/kernel=", "/k=") for m in maps])]
    )
    # A map of build.toml's own, elsewhere on the line, keeps its place (gcc tries the last first).
    user = "-ffile-prefix-map=/x/kernel=evil"
    assert places.command(["g++", *maps, "-O2", user]) != places.command(["g++", user, "-O2", *maps])
    # What a compile read: named by the folder's place, found where this build has it.
    assert places.listed(Path("/x/kernel/csrc/a.h")) == "$0/csrc/a.h"
    assert places.listed(Path("/usr/include/stdio.h")) == "/usr/include/stdio.h"
    elsewhere = Places({Path("/y/checkout"): "relu", Path("/y/km"): "kernel_matrix"})
    assert elsewhere.path("$0/csrc/a.h") == Path("/y/checkout/csrc/a.h")
    assert elsewhere.path("/usr/include/stdio.h") == Path("/usr/include/stdio.h")
    # An entry cannot climb out of a folder, or name one this build has not.
    for hostile in ("$0/../etc/passwd", "$0/csrc/../../etc/passwd", "$0//etc/passwd", "$7/a.h", "relative/a.h"):
        assert elsewhere.path(hostile) is None, hostile


def test_an_entry_naming_one_file_twice_needs_both_digests_to_hold(tmp_path):
    header = tmp_path / "kernel" / "a.h"
    header.parent.mkdir()
    header.write_text("#define A 1\n")
    digest = hashlib.sha256(header.read_bytes()).hexdigest()
    places = Places({header.parent: "kernel"})
    cache = ObjectCache(tmp_path / "cache")
    assert cache._inputs_match({"inputs": {"$0/a.h": digest, str(header): digest}}, places)
    assert not cache._inputs_match({"inputs": {"$0/a.h": digest, str(header): "0" * 64}}, places)
    assert not cache._inputs_match({"inputs": {"$0/a.h": "0" * 64, str(header): digest}}, places)
    assert shown(places.argument(f"-I{header.parent}")) == "-I<kernel>"


def test_a_copy_of_a_folder_elsewhere_takes_its_objects_and_an_edited_copy_compiles(tmp_path):
    """Two checkouts of one kernel (ccache's base_dir case): a compile in the second takes
    the first one's object, the same bytes its own compile makes; a changed header, or a
    build naming no folders, compiles."""
    first, second = tmp_path / "first" / "kernel", tmp_path / "second" / "kernel"
    first.mkdir(parents=True)
    (first / "value.h").write_text("#define VALUE 1\n")
    (first / "src.cpp").write_text(
        '#include "value.h"\nconst char *where() { return __FILE__; }\nint v() { return VALUE; }\n'
    )
    shutil.copytree(first, second)
    cache = ObjectCache(tmp_path / "cache")

    def compile_in(folder: Path, output: Path, named: bool = True) -> bool:
        argv = [CXX, "-O1", f"-ffile-prefix-map={folder}=kernel", "-c", str(folder / "src.cpp"), "-I", str(folder)]
        places = Places({folder: "kernel"}) if named else Places()
        step = Step("compile", [*argv, "-o", str(output)], output, compilers=(CXX,), places=places)
        seen: dict[str, bool] = {}
        link = Step(
            "link", [CXX, "-shared", str(output), "-o", str(output.with_suffix(".so"))], output.with_suffix(".so")
        )
        run_steps([step], link, cwd=folder, cache=cache, on_done=lambda s, cached: seen.setdefault(s.label, cached))
        return seen["compile"]

    assert compile_in(first, tmp_path / "first.o") is False
    assert compile_in(second, tmp_path / "second.o") is True
    # The object the second checkout compiles itself (no cache) is the one it took.
    subprocess.run([CXX, "-O1", f"-ffile-prefix-map={second}=kernel", "-c", str(second / "src.cpp"),
                    "-I", str(second), "-o", str(tmp_path / "cold.o")], check=True)  # fmt: skip
    assert (tmp_path / "second.o").read_bytes() == (tmp_path / "cold.o").read_bytes()
    assert compile_in(second, tmp_path / "unnamed.o", named=False) is False  # its key holds the paths
    (second / "value.h").write_text("#define VALUE 2\n")
    assert compile_in(second, tmp_path / "edited.o") is False


@pytest.mark.build  # two builds of the variant, the first cold (it asserts nothing came from a cache)
def test_changing_one_source_recompiles_only_it_and_renames_the_namespace(kernel_copy, tmp_path):
    """The binding compiled against torch's headers is reused when only the
    kernel file changes, yet the new build gets a new op namespace."""
    build_dir = tmp_path / "build"
    args = ("build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", str(build_dir))
    kernel_matrix(*args, check=True)
    variant = next(d for d in build_dir.iterdir() if (d / "metadata.json").is_file())
    first_so = sorted(p.name for p in variant.glob("*.so"))
    first = json.loads((build_dir / "logs" / f"{variant.name}.build.json").read_text())
    assert first["cached"] == 0 and first["compiled"] >= 2

    cpu_source = kernel_copy / "csrc" / "img2gray_cpu.cpp"
    cpu_source.write_text(cpu_source.read_text() + "\n// a change\n")
    result = kernel_matrix(*args, check=True)
    again = json.loads((build_dir / "logs" / f"{variant.name}.build.json").read_text())
    assert (again["compiled"], again["cached"]) == (1, first["compiled"] - 1)
    assert "cached compile torch-ext/torch_binding.cpp" in result.stderr
    assert "done compile csrc/img2gray_cpu.cpp" in result.stderr
    assert sorted(p.name for p in variant.glob("*.so")) != first_so  # _img2gray_cpu_<new hash>.abi3.so
    # The rebuilt variant loads and its op works under its new namespace.
    test = kernel_matrix("test", variant.name, "--build-dir", str(build_dir), *ONE_KERNEL_TEST)
    assert test.returncode == 0, test.stdout + test.stderr


def _forge(staged: Path, cache: ObjectCache, argv: list[str], output: Path, listed: Path, payload: bytes) -> None:
    """What a hostile build container can write: an entry for another compile's key, naming
    an object of its own and one input it picked (a file that never changes)."""
    obj = hashlib.sha256(payload).hexdigest()
    (staged / "objects").mkdir(parents=True, exist_ok=True)
    (staged / "objects" / obj).write_bytes(payload)
    key = cache._key(argv, output, [CXX])
    manifest = staged / "manifests" / key[:2] / f"{key}.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(listed.read_bytes()).hexdigest()
    manifest.write_text(json.dumps([{"inputs": {str(listed): digest}, "object": obj}]))


# A recipe digest (recipe.recipe_digest): the scopes below are one recipe's.
RECIPE = "0" * 64


def test_a_forged_entry_reaches_only_the_scope_of_the_kernel_that_wrote_it(tmp_path):
    """Issue 23: a cell's staged entries are merged into its own kernel's scope at its trust
    level; another kernel, and a trusted build of the same kernel, never read them."""
    (tmp_path / "src.cpp").write_text("int value() { return 3; }\n")
    (tmp_path / "never-changes.h").write_text("\n")
    output = tmp_path / "victim.o"
    argv = [CXX, "-c", str(tmp_path / "src.cpp"), "-o", str(output)]
    root = tmp_path / "cache"
    evil_pr = ObjectCache.for_kernel(root, "evil", trusted=False, recipe=RECIPE)
    evil = ObjectCache.for_kernel(root, "evil", trusted=True, recipe=RECIPE)
    _forge(tmp_path / "staged", evil, argv, output, tmp_path / "never-changes.h", b"attacker's object")
    assert evil_pr.merge(tmp_path / "staged") == 1
    assert evil.merge(tmp_path / "staged") == 1
    # The forged entry is believed where it was written (the kernel's own code made it) ...
    assert ObjectCache.for_kernel(root, "evil", trusted=True, recipe=RECIPE).fetch(argv, output, [CXX])
    assert output.read_bytes() == b"attacker's object"
    output.unlink()
    # ... and nowhere else: not by another kernel, trusted or not.
    for trusted in (True, False):
        assert not ObjectCache.for_kernel(root, "victim", trusted=trusted, recipe=RECIPE).fetch(argv, output, [CXX])
    assert not output.exists()
    # A pull request's entries of a kernel never reach that kernel's trusted builds;
    # a pull request's build reads the trusted scope, and writes only its own.
    shutil.rmtree(root / "trusted")
    assert not ObjectCache.for_kernel(root, "evil", trusted=True, recipe=RECIPE).fetch(argv, output, [CXX])
    trusted_victim = ObjectCache.for_kernel(root, "victim", trusted=True, recipe=RECIPE)
    assert _compile(tmp_path, trusted_victim, "trusted") is False
    pr_victim = ObjectCache.for_kernel(root, "victim", trusted=False, recipe=RECIPE)
    assert _compile(tmp_path, pr_victim, "from-pr") is True
    assert not (root / "untrusted" / "victim").exists()
    # Another recipe of the same kernel and trust level reads none of them.
    assert _compile(tmp_path, ObjectCache.for_kernel(root, "victim", trusted=True, recipe="1" * 64), "other") is False


def test_a_scope_keeps_its_kernels_most_recently_used_recipes_only(tmp_path):
    """Each recipe has a scope; a build prunes its kernel's others beyond MAX_RECIPES (a recipe
    no longer built is never read again), least recently used first, and an older layout's
    folders; other kernels' and trust levels' scopes are left alone."""
    (tmp_path / "src.cpp").write_text("int value() { return 3; }\n")
    root = tmp_path / "cache"
    recipes = [f"{n:064x}" for n in range(MAX_RECIPES + 2)]
    for n, recipe in enumerate(recipes):
        _compile(tmp_path, ObjectCache.for_kernel(root, "k", trusted=True, recipe=recipe), f"r{n}")
        os.utime(root / "trusted" / "k" / recipe, (n, n))  # used in this order
    (root / "trusted" / "k" / "objects").mkdir()  # the layout before recipes
    _compile(tmp_path, ObjectCache.for_kernel(root, "other", trusted=True, recipe=recipes[0]), "other")
    (root / "untrusted" / "k" / recipes[0]).mkdir(parents=True)
    cache = ObjectCache.for_kernel(root, "k", trusted=True, recipe=recipes[1])  # an old one, built again
    assert cache.prune(max_bytes=10**9) > 0
    kept = sorted(p.name for p in (root / "trusted" / "k").iterdir())
    assert kept == sorted([recipes[1], *recipes[-(MAX_RECIPES - 1) :]])
    assert (root / "trusted" / "other" / recipes[0]).is_dir() and (root / "untrusted" / "k" / recipes[0]).is_dir()
    # A cache made by hand (no kernel's folder of recipes) prunes only itself.
    (tmp_path / "beside").mkdir()
    ObjectCache(root / "trusted" / "k" / recipes[1]).prune(max_bytes=0)
    assert (tmp_path / "beside").is_dir() and len(list((root / "trusted" / "k").iterdir())) == MAX_RECIPES


def test_a_planted_object_is_replaced_by_the_merge_of_a_sound_one(tmp_path):
    """An object file whose bytes are not its name's (planted in the scope) is refused when
    used, and the next build's sound object of that name replaces it."""
    good = b"good object"
    name = hashlib.sha256(good).hexdigest()
    scope = ObjectCache(tmp_path / "scope")
    ObjectCache._write(scope.root / "objects" / name, b"planted")
    ObjectCache._write(tmp_path / "staged" / "objects" / name, good)
    scope.merge(tmp_path / "staged")
    assert (scope.root / "objects" / name).read_bytes() == good


def test_new_entries_go_first_and_the_oldest_are_evicted(tmp_path):
    import kernel_matrix.building.objcache as objcache

    (tmp_path / "src.cpp").write_text("int value() { return 3; }\n")
    output = tmp_path / "x.o"
    argv = [CXX, "-c", str(tmp_path / "src.cpp"), "-o", str(output)]
    cache = ObjectCache(tmp_path / "cache")
    for n in range(objcache.MAX_ENTRIES + 2):
        listed = tmp_path / f"input-{n}.h"
        listed.write_text(str(n))
        _forge(tmp_path / f"staged-{n}", cache, argv, output, listed, f"object {n}".encode())
        assert cache.merge(tmp_path / f"staged-{n}") == 1
    (manifest,) = (tmp_path / "cache" / "manifests").glob("*/*.json")
    entries = json.loads(manifest.read_text())
    assert len(entries) == objcache.MAX_ENTRIES
    assert [Path(next(iter(e["inputs"]))).name for e in entries[:2]] == ["input-17.h", "input-16.h"]
    # Objects no entry names, then the least recently written command lines, go by size.
    assert len(list((tmp_path / "cache" / "objects").iterdir())) == objcache.MAX_ENTRIES + 2
    freed = cache.prune(max_bytes=10**6)
    assert freed == len(b"object 0") + len(b"object 1")
    assert len(list((tmp_path / "cache" / "objects").iterdir())) == objcache.MAX_ENTRIES
    cache.prune(max_bytes=0)
    assert not list((tmp_path / "cache" / "objects").iterdir())
    assert not list((tmp_path / "cache" / "manifests").glob("*/*.json"))


@pytest.mark.build
def test_each_build_records_what_its_compiles_are_looked_up_by(object_cache, tmp_path):
    """The device's machines missed each other's objects with the same inputs: the record says
    what differed. A compiler variable set on one side shows as that difference, and only it."""
    from conftest import KERNEL_DIR

    def build(folder: str, kernel: Path = KERNEL_DIR, **env: str) -> tuple[list[dict], str]:
        result = kernel_matrix(
            "build", "--backend", "cpu", "--kernel-dir", str(kernel), "--build-dir", str(tmp_path / folder),
            "--cache-dir", str(object_cache), env={**os.environ, **env}, check=True,
        )  # fmt: skip
        (record,) = (tmp_path / folder / "logs").glob("*.cache-keys.json")
        objects = next(line for line in (result.stdout + result.stderr).splitlines() if line.startswith("objects"))
        return json.loads(record.read_text()), objects

    first, _ = build("first")
    scope = object_cache / "trusted" / "img2gray" / recipe_digest(KERNEL_DIR) / "manifests"
    assert all((scope / e["key"][:2] / f"{e['key']}.json").is_file() for e in first)  # the keys the cache uses
    again, objects = build("again")
    assert [e["key"] for e in again] == [e["key"] for e in first] and "0 compiled" in objects
    # A checkout elsewhere: its command lines name other folders, its keys are the same.
    checkout = tmp_path / "checkout" / "img2gray"
    shutil.copytree(KERNEL_DIR, checkout, ignore=shutil.ignore_patterns("build", "__pycache__"))
    moved, objects = build("moved", checkout)
    assert [e["key"] for e in moved] == [e["key"] for e in first] and "0 compiled" in objects
    assert all(str(checkout) in " ".join(e["argv"]) for e in moved)
    other, objects = build("other", CPATH=str(tmp_path / "nothing-here"))
    assert "0 from the cache" in objects
    assert [e["step"] for e in first] == [e["step"] for e in other] and first  # compiles only, not the link
    for mine, theirs in zip(first, other, strict=True):
        assert mine["key"] != theirs["key"]
        assert (mine["argv"], mine["compilers"]) == (theirs["argv"], theirs["compilers"])
        differ = {k for k in mine["environment"] if mine["environment"][k] != theirs["environment"][k]}
        assert differ == {"CPATH"}
    # benchmarks/cache_keys_diff.py says so, step by step, from the two records alone.
    folders = ("first", "other", "again", "moved")
    records = [next((tmp_path / folder / "logs").glob("*.cache-keys.json")) for folder in folders]
    diff = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "cache_keys_diff.py"), *map(str, records[:2])],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert diff.returncode == 1, diff.stderr
    lines = diff.stdout.splitlines()
    assert lines[-1] == f"0 of {len(first)} shared steps have the same key", diff.stdout
    assert lines[:-1] == [f"{e['step']}: $CPATH: A None, B {str(tmp_path / 'nothing-here')!r}" for e in first]
    for record in records[2:]:
        same = subprocess.run(
            [sys.executable, str(REPO / "benchmarks" / "cache_keys_diff.py"), str(records[0]), str(record)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert (
            same.returncode == 0
            and same.stdout.splitlines()[0] == f"{len(first)} of {len(first)} shared steps have the same key"
        ), same.stdout
