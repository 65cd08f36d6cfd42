"""Issues 39 (findings 1 and 2) and 41 (finding 2): nothing reused is trusted without checking
it at the moment of use, against a value the reader computes.

- An object-cache entry's object must be named by a plain sha256 and hash to it when a build
  uses it: a planted object, or an entry naming `../../x` or an absolute path, is refused
  with one line and compiled again.
- Entries are scoped by the host's digest of the build recipe (build.toml and what its flags
  name): what the build of a build.toml with a -wrapper wrote is never read by a build of the
  reverted build.toml.
- A fetched dependency's headers are hashed again when used: an edited header is fetched
  again with one line, and metadata.json records the digest of the files compiled.

Native: no container engine; real g++ compiles."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import test_dependencies
from conftest import kernel_matrix

from kernel_matrix.building import dependencies
from kernel_matrix.building.compile import DEFAULT_SOURCE_DATE_EPOCH, Step, compile_environment, run_steps
from kernel_matrix.building.objcache import ObjectCache
from kernel_matrix.building.recipe import recipe_digest
from kernel_matrix.errors import ToolchainError

# The loopback archive server (a fixture) and GitHub's archive layout, as the pins' own tests use them.
serve = test_dependencies.serve
_github_archive = test_dependencies._github_archive
CXX = shutil.which("g++")
CC = shutil.which("gcc")
needs_gcc = pytest.mark.skipif(CXX is None or CC is None, reason="needs gcc and g++")
CPU_VARIANT_STEP = "compile csrc/img2gray_cpu.cpp"
# What a planted object or header adds to the variant: a symbol kept in the .so.
OBJECT_MARKER = b"KM-PLANTED-OBJECT"
HEADER_MARKER = b"KM-PLANTED-HEADER"


def _marker_definition(name: str, marker: bytes) -> str:
    return f'\nextern "C" __attribute__((used, visibility("default"))) const char {name}[] = "{marker.decode()}";\n'


# --- the object's name and bytes, checked when it is used -----------------------------------


def _entries_of(manifest: Path) -> list[dict]:
    return json.loads(manifest.read_text())


def _cpu_step(build_dir: Path, variant: str) -> dict:
    (record,) = (build_dir / "logs").glob(f"{variant}.cache-keys.json")
    return next(e for e in json.loads(record.read_text()) if e["step"] == CPU_VARIANT_STEP)


@needs_gcc
@pytest.mark.build  # three builds of img2gray's CPU variant, the first cold (about 10 s in all)
def test_a_planted_object_or_an_entry_naming_a_path_is_refused_and_compiled_again(kernel_copy, tmp_path):
    """39.1: sources untouched, an object planted in the kernel's trusted scope (its bytes not
    its name's) and entries naming `../../x` or an absolute path: the build refuses them, one
    line each saying why, compiles that file again, and the variant is the clean one."""
    build_dir, cache = tmp_path / "build", tmp_path / "cache"
    args = ("build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", str(build_dir))
    args += ("--cache-dir", str(cache), "--no-load-check")
    kernel_matrix(*args, check=True)
    (variant,) = [d for d in build_dir.iterdir() if (d / "metadata.json").is_file()]
    (clean_so,) = variant.glob("*.so")
    clean = clean_so.read_bytes()
    assert OBJECT_MARKER not in clean

    step = _cpu_step(build_dir, variant.name)
    (manifest,) = cache.glob(f"trusted/img2gray/**/manifests/{step['key'][:2]}/{step['key']}.json")
    scope = manifest.parent.parent.parent
    assert scope == cache / "trusted" / "img2gray" / recipe_digest(kernel_copy)
    (entry,) = _entries_of(manifest)
    good_object = scope / "objects" / entry["object"]
    pristine = (manifest.read_bytes(), good_object.read_bytes())

    # The attacker's object: the same compile of the source with a marker added.
    source = kernel_copy / "csrc" / "img2gray_cpu.cpp"
    hostile = tmp_path / "hostile" / "img2gray_cpu.cpp"
    hostile.parent.mkdir()
    hostile.write_text(source.read_text() + _marker_definition("km_planted", OBJECT_MARKER))
    planted_object = tmp_path / "hostile" / "planted.o"
    argv = [str(hostile) if a == str(source) else a for a in step["argv"]] + [str(planted_object)]
    subprocess.run(argv, cwd=kernel_copy, check=True)
    planted = planted_object.read_bytes()

    outside = scope / "objects" / ".." / ".." / "planted.o"  # where "../../planted.o" reaches
    cases = {
        "planted bytes": ("object whose bytes do not match its name", entry["object"]),
        "relative path": ("entry whose object is not named by a sha256", "../../planted.o"),
        "absolute path": ("entry whose object is not named by a sha256", str(planted_object)),
    }
    for case, (reason, name) in cases.items():
        manifest.write_bytes(pristine[0])
        good_object.write_bytes(planted if case == "planted bytes" else pristine[1])
        outside.write_bytes(planted)
        if case != "planted bytes":  # in the entry's place, listing the compile's real inputs
            manifest.write_text(json.dumps([{"inputs": entry["inputs"], "object": name}]))
        result = kernel_matrix(*args, check=True)
        output = result.stdout + result.stderr
        assert [ln for ln in output.splitlines() if ln.startswith("cache:")] == [f"cache: refused 1 {reason}; compiled"]
        assert "1 compiled, 1 from the cache" in output, (case, output)
        (built,) = variant.glob("*.so")
        assert OBJECT_MARKER not in built.read_bytes(), case
        assert built.read_bytes() == clean, case
    # The object compiled again replaced the planted one under its name.
    assert good_object.read_bytes() == pristine[1]


@needs_gcc
def test_fetch_checks_the_object_it_copies_and_says_why_it_refused(tmp_path):
    """The same at the cache's level, quickly: entries with a path for an object, a planted
    object, an object that is a FIFO (never waited on) and one named with a trailing newline
    are refused and counted; the compile's own sound entry is used after them."""
    (tmp_path / "src.cpp").write_text("int value() { return 3; }\n")
    output, depfile = tmp_path / "x.o", tmp_path / "x.o.d"
    argv = [CXX, "-c", str(tmp_path / "src.cpp"), "-o", str(output)]
    cache = ObjectCache(tmp_path / "cache")
    subprocess.run([*argv, "-MD", "-MF", str(depfile)], check=True)
    good = output.read_bytes()
    cache.store(argv, output, [CXX], depfile, cwd=tmp_path, started=os.path.getmtime(depfile) + 1)
    manifest = next((tmp_path / "cache" / "manifests").glob("*/*.json"))
    (entry,) = _entries_of(manifest)
    (tmp_path / "planted").write_bytes(b"planted")
    planted_name = hashlib.sha256(b"other bytes").hexdigest()
    ObjectCache._write(cache.root / "objects" / planted_name, b"planted")
    fifo_name = hashlib.sha256(b"fifo").hexdigest()
    os.mkfifo(cache.root / "objects" / fifo_name)
    hostile = [
        {"inputs": entry["inputs"], "object": "../../planted"},
        {"inputs": entry["inputs"], "object": str(tmp_path / "planted")},
        {"inputs": entry["inputs"], "object": entry["object"] + "\n"},
        {"inputs": entry["inputs"], "object": planted_name},
        {"inputs": entry["inputs"], "object": fifo_name},
    ]
    manifest.write_text(json.dumps(hostile))
    output.unlink()
    reader = ObjectCache(tmp_path / "cache")
    assert not reader.fetch(argv, output, [CXX])
    assert not output.exists()
    assert reader.refusals() == [
        "cache: refused 3 entries whose object is not named by a sha256; compiled",
        "cache: refused 1 object whose bytes do not match its name; compiled",
        "cache: refused 1 object that is not a plain file; compiled",
    ]
    manifest.write_text(json.dumps([*hostile[:1], entry]))
    again = ObjectCache(tmp_path / "cache")
    assert again.fetch(argv, output, [CXX]) and output.read_bytes() == good
    assert again.refusals() == [
        "cache: refused 1 entry whose object is not named by a sha256; another entry's object used"
    ]


# --- a reverted build.toml never reads what the malicious one's build wrote ------------------

CLEAN_TOML = """\
[general]
name = "k"
version = 1
backends = ["cpu"]

[kernel.k_cpu]
backend = "cpu"
depends = ["torch"]
src = ["src.c"]
cxx-flags = ["-O1"]
"""
WRAPPER = """\
#!/bin/sh
# What a malicious commit's build runs in the compile: it plants, where the build writes its
# new cache entries, an entry for the key of the clean build.toml's compile.
cp -R "$(dirname "$0")/payload/." "$KM_STAGED/"
exec "$@"
"""


def _gcc_compile(kernel: Path, cache: ObjectCache, flags: list[str], name: str) -> bool:
    """src.c compiled with flags, in kernel (the compile's working folder, as a build's),
    through cache; True where its object came from the cache."""
    output = kernel / f"{name}.o"
    argv = [CC, *flags, "-c", str(kernel / "src.c"), "-o", str(output)]
    seen: dict[str, bool] = {}
    link = Step("link", [CC, "-shared", str(output), "-o", str(kernel / f"{name}.so")], kernel / f"{name}.so")
    run_steps(
        [Step("compile", argv, output, compilers=(CC,))],
        link,
        cwd=kernel,
        cache=cache,
        on_done=lambda step, cached: seen.setdefault(step.label, cached),
    )
    return seen["compile"]


@needs_gcc
def test_a_reverted_build_toml_never_reads_what_the_malicious_recipes_build_wrote(tmp_path, monkeypatch):
    """41.2, at the cache's level with a real gcc -wrapper: a trusted build of a build.toml
    whose flags add a wrapper plants (through the folder a container build writes, which the
    host merges into the scope it chose) an entry for the clean build.toml's compile, listing
    the clean source as its input. After the revert (the kernel byte-identical to the clean
    commit) the build reads only its own recipe's scope: it compiles, free of the plant."""
    kernel, staged, root = tmp_path / "kernel", tmp_path / "out" / ".cache-new", tmp_path / "cache"
    kernel.mkdir()
    (kernel / "src.c").write_text("int value(void) { return 3; }\n")
    (kernel / "build.toml").write_text(CLEAN_TOML)
    clean_recipe = recipe_digest(kernel)

    # The attacker's payload: an object with a marker, and the entry naming it for the key of
    # the clean compile (what kernel-matrix's own planner computes), its one input the source.
    (tmp_path / "planted.c").write_text(f'const char marker[] = "{OBJECT_MARKER.decode()}";\n')
    subprocess.run([CC, "-c", str(tmp_path / "planted.c"), "-o", str(tmp_path / "planted.o")], check=True)
    planted = (tmp_path / "planted.o").read_bytes()
    clean_output = kernel / "reverted.o"
    clean_argv = [CC, "-O1", "-c", str(kernel / "src.c"), "-o", str(clean_output)]
    compiler_env = compile_environment(DEFAULT_SOURCE_DATE_EPOCH)  # what run_steps gives every compile
    key = ObjectCache(root)._key(clean_argv, clean_output, [CC], compiler_env)
    payload = kernel / "payload"
    ObjectCache._write(payload / "objects" / hashlib.sha256(planted).hexdigest(), planted)
    inputs = {str(kernel / "src.c"): hashlib.sha256((kernel / "src.c").read_bytes()).hexdigest()}
    entry = {"inputs": inputs, "object": hashlib.sha256(planted).hexdigest()}
    ObjectCache._write(payload / "manifests" / key[:2] / f"{key}.json", json.dumps([entry]).encode())
    (kernel / "w.sh").write_text(WRAPPER)
    (kernel / "w.sh").chmod(0o755)
    (kernel / "build.toml").write_text(CLEAN_TOML.replace('["-O1"]', '["-O1", "-wrapper", "./w.sh"]'))

    # The malicious commit, built as trusted: the host picks the scope from the files.
    malicious_recipe = recipe_digest(kernel)
    assert malicious_recipe != clean_recipe
    host = ObjectCache.for_kernel(root, "k", trusted=True, recipe=malicious_recipe)
    monkeypatch.setenv("KM_STAGED", str(staged))
    staged.mkdir(parents=True)
    in_container = ObjectCache(host.root, writes=staged)
    assert _gcc_compile(kernel, in_container, ["-O1", "-wrapper", "./w.sh"], "malicious") is False
    assert host.merge(staged) >= 1
    # The plant is there, and believed by a build of that recipe (whose wrapper runs anyway).
    assert ObjectCache.for_kernel(root, "k", trusted=True, recipe=malicious_recipe).fetch(
        clean_argv, clean_output, [CC], compiler_env
    )
    assert OBJECT_MARKER in clean_output.read_bytes()
    clean_output.unlink()

    # git revert: the kernel folder as the clean commit has it.
    (kernel / "build.toml").write_text(CLEAN_TOML)
    shutil.rmtree(payload)
    (kernel / "w.sh").unlink()
    assert recipe_digest(kernel) == clean_recipe
    reverted = ObjectCache.for_kernel(root, "k", trusted=True, recipe=recipe_digest(kernel))
    assert _gcc_compile(kernel, reverted, ["-O1"], "reverted") is False  # compiled, not the plant
    assert OBJECT_MARKER not in clean_output.read_bytes()
    assert OBJECT_MARKER not in (kernel / "reverted.so").read_bytes()
    # A pull request's build of the reverted tree reads the trusted scope of its own recipe only.
    pull_request = ObjectCache.for_kernel(root, "k", trusted=False, recipe=recipe_digest(kernel))
    assert _gcc_compile(kernel, pull_request, ["-O1"], "pr") is True
    assert OBJECT_MARKER not in (kernel / "pr.o").read_bytes()


def _kernel(root: Path, flags: str, files: dict[str, str]) -> Path:
    root.mkdir()
    (root / "build.toml").write_text(CLEAN_TOML.replace('["-O1"]', flags))
    for name, text in {"src.c": "int value(void) { return 3; }\n", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        ('["-O1", "-fplugin=./plugin.so"]', "plugin.so"),
        ('["-O1", "@flags.txt"]', "flags.txt"),
        ('["-O1", "-specs=tools/my.specs"]', "tools/my.specs"),
        ('["-O1", "-Btools"]', "tools/my.specs"),  # a folder named: every file in it
        ('["-O1", "-Xcompiler", "-wrapper,/src/tools/w.sh"]', "tools/w.sh"),  # as a container sees the kernel
        ('["$<$<COMPILE_LANGUAGE:CXX>:-imacros>", "$<$<COMPILE_LANGUAGE:CXX>:flags.txt>"]', "flags.txt"),
    ],
)
def test_the_recipe_covers_every_file_the_flags_name(tmp_path, flags, named):
    files = {"plugin.so": "ELF", "flags.txt": "-O2\n", "tools/my.specs": "*cc1:\n", "tools/w.sh": 'exec "$@"\n'}
    kernel = _kernel(tmp_path / "k", flags, files)
    before = recipe_digest(kernel)
    assert recipe_digest(kernel) == before  # the same files, the same recipe
    (kernel / named).write_text("edited by a later commit\n")
    assert recipe_digest(kernel) != before


def test_a_plain_recipe_is_build_toml_and_kernel_matrix_only_and_one_that_runs_a_program_is_the_whole_tree(tmp_path):
    """A source edit keeps a plain recipe (objects are then matched by the compiler's own list
    of what it read); where a flag can run a program, any file of the kernel changes it (the
    program may read any of them), but not a build folder inside it."""
    plain = _kernel(tmp_path / "plain", '["-O1", "-DX=1"]', {"csrc/a.h": "#define A 1\n"})
    before = recipe_digest(plain)
    (plain / "csrc" / "a.h").write_text("#define A 2\n")
    (plain / "src.c").write_text("int value(void) { return 4; }\n")
    assert recipe_digest(plain) == before
    (plain / "build.toml").write_text((plain / "build.toml").read_text() + "\n# a comment\n")
    assert recipe_digest(plain) != before

    for flags in ('["-wrapper", "/bin/sh,-c,. ./c*/a.h"]', '["-Xcompiler=-wrapper,x"]', '["-B", "/usr/bin/"]'):
        runs = _kernel(tmp_path / f"runs{len(list(tmp_path.iterdir()))}", flags, {"csrc/a.h": "#define A 1\n"})
        before = recipe_digest(runs)
        (runs / "build" / "logs").mkdir(parents=True)
        (runs / "build" / "logs" / "x.log").write_text("a build's output\n")
        assert recipe_digest(runs) == before
        (runs / "csrc" / "a.h").write_text("#define A 2\n")
        assert recipe_digest(runs) != before, flags


# --- a fetched dependency, hashed again when used ----------------------------------------------


def _small_pin(tmp_path: Path, serve) -> tuple[dependencies.Pin, Path]:
    """A pin of a small header tree, served as GitHub's archive of it on loopback; the
    tree it names (its digest)."""
    tree = tmp_path / "upstream" / "include"
    (tree / "cutlass").mkdir(parents=True)
    (tree / "cutlass" / "cutlass.h").write_text("#define CUTLASS_MAJOR 3\n")
    (tree / "cute").mkdir()
    (tree / "cute" / "tensor.hpp").write_text("// cute\n")
    pin = dependencies.pins()["cutlass_4_0"]
    url = serve(_github_archive(tree, f"cutlass-{pin.commit}"))
    return replace(pin, wheel=None, archive=url, digest=dependencies.tree_digest(tree)), tree


def test_an_edited_header_in_a_fetched_pin_is_fetched_again_with_one_line(tmp_path, serve, capsys):
    """39.2: a header edited inside the dependency cache (read-only modes stop nothing for the
    folder's owner) is found when the pin is next used: fetched again, one line saying why."""
    pin, _ = _small_pin(tmp_path, serve)
    cache = tmp_path / "deps"
    folder = dependencies.fetch(pin, cache)
    header = folder / "include" / "cutlass" / "cutlass.h"
    header.chmod(0o644)
    header.write_text("#define CUTLASS_MAJOR 3\n#define PLANTED 1\n")
    edited = dependencies.tree_digest(folder / "include")
    capsys.readouterr()
    assert dependencies.fetch(pin, cache) == folder
    lines = capsys.readouterr().err.splitlines()
    (why,) = [ln for ln in lines if "changed since they were fetched" in ln]
    assert why == (
        f"cutlass_4_0: the headers in {folder} have sha256 {edited}, not the pinned {pin.digest} "
        "(changed since they were fetched): fetching them again"
    )
    assert "PLANTED" not in header.read_text()
    assert dependencies.tree_digest(folder / "include") == pin.digest
    assert [p.name for p in cache.iterdir()] == [folder.name], "the edited copy is gone"
    # Unchanged, it is not hashed into a line again, nor fetched.
    assert dependencies.fetch(pin, cache) == folder and "fetching" not in capsys.readouterr().err


def test_the_recorded_digest_is_computed_from_the_files(tmp_path, monkeypatch):
    """fingerprint() and metadata.json's record are the digest of the files as they are, not
    the pin's stated value; a pin's folder that no longer holds the pin is refused in one line."""
    pin = dependencies.pins()["cutlass_4_0"]
    folder = tmp_path / pin.folder_name
    (folder / "include" / "cutlass").mkdir(parents=True)
    (folder / "include" / "cutlass" / "cutlass.h").write_text("// not CUTLASS 4.0's\n")
    found = dependencies.Resolved("cutlass_4_0", folder, pin)
    assert found.fingerprint() == dependencies.tree_digest(folder / "include") != pin.digest
    with pytest.raises(ToolchainError) as refused:
        found.record()
    assert "\n" not in str(refused.value) and "changed during the build" in str(refused.value)
    assert pin.digest in str(refused.value) and found.fingerprint() in str(refused.value)


def test_an_override_of_links_to_other_folders_is_hashed_as_compiled(tmp_path, monkeypatch):
    """39.2: $KERNEL_MATRIX_DEPS_DIR/<name> a link, and its include/ the pin's files plus a link
    to another folder: the recorded digest covers the linked folder's headers (the compiler
    reads them), so it is not the pin's, and the folder recorded is the one the link names."""
    real = tmp_path / "elsewhere" / "cutlass_4_0"
    (real / "include" / "cutlass").mkdir(parents=True)
    (real / "include" / "cutlass" / "cutlass.h").write_text("// the pin's\n")
    pin_digest = dependencies.tree_digest(real / "include")
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "planted.h").write_text("#define PLANTED 1\n")
    (real / "include" / "extra").symlink_to(extra)
    (real / "include" / "loop").symlink_to(real / "include")  # followed once, not forever
    deps = tmp_path / "deps"
    deps.mkdir()
    (deps / "cutlass_4_0").symlink_to(real)
    monkeypatch.setenv("KERNEL_MATRIX_DEPS_DIR", str(deps))
    pin = dependencies.pins()["cutlass_4_0"]
    monkeypatch.setattr(dependencies, "pins", lambda: {"cutlass_4_0": replace(pin, digest=pin_digest)})
    found = dependencies.resolve("cutlass_4_0", "build.toml")
    assert found.folder == real.resolve()
    as_compiled = tmp_path / "as-compiled"
    (as_compiled / "cutlass").mkdir(parents=True)
    (as_compiled / "cutlass" / "cutlass.h").write_text("// the pin's\n")
    (as_compiled / "extra").mkdir()
    (as_compiled / "extra" / "planted.h").write_text("#define PLANTED 1\n")
    assert found.fingerprint() == dependencies.tree_digest(as_compiled) != pin_digest
    assert found.record() == f"$KERNEL_MATRIX_DEPS_DIR/cutlass_4_0 (not pinned), headers sha256:{found.fingerprint()}"
    # The linked folder edited: the next use hashes it again.
    (extra / "planted.h").write_text("#define PLANTED 2\n")
    assert found.fingerprint() != dependencies.tree_digest(as_compiled)


@pytest.fixture(scope="module")
def cutlass_wheel(tmp_path_factory) -> Path:
    """The folder of nvidia-cutlass 3.8.0.0's wheel (the cutlass_3_8 pin), by hash-checked pip:
    a build's fetch then finds it there (PIP_NO_INDEX, PIP_FIND_LINKS), offline."""
    wheel = dependencies.pins()["cutlass_3_8"].wheel
    assert wheel is not None
    folder = tmp_path_factory.mktemp("cutlass-wheel")
    (folder / "requirements.txt").write_text(f"{wheel.requirement} --hash=sha256:{wheel.sha256}\n")
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes", "-q"]
    subprocess.run([*argv, "-r", str(folder / "requirements.txt"), "-d", str(folder)], check=True)
    return folder


@needs_gcc
@pytest.mark.build  # img2gray's CPU variant against CUTLASS 3.8's headers, once (about 10 s)
def test_a_build_with_an_edited_header_in_the_deps_cache_fetches_it_again(
    cutlass_wheel, kernel_copy, tmp_path, monkeypatch
):
    """39.2 end to end: CUTLASS's cutlass.h edited inside $KERNEL_MATRIX_DEPS_CACHE after it was
    fetched; the build fetches the pin again (one line saying why), the variant is free of the
    edit, and metadata.json records the digest of the headers it compiled: the pin's."""
    pin = dependencies.pins()["cutlass_3_8"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEL_MATRIX_DEPS")}
    env |= {"KERNEL_MATRIX_DEPS_CACHE": str(tmp_path / "deps"), "PIP_NO_INDEX": "1"}
    env["PIP_FIND_LINKS"] = str(cutlass_wheel)
    for name in ("PIP_NO_INDEX", "PIP_FIND_LINKS"):
        monkeypatch.setenv(name, env[name])
    folder = dependencies.fetch(pin, tmp_path / "deps")
    header = folder / "include" / "cutlass" / "cutlass.h"
    header.chmod(0o644)
    header.write_text(header.read_text() + _marker_definition("km_planted_header", HEADER_MARKER))

    toml = kernel_copy / "build.toml"
    text = toml.read_text()
    cpu = text.index("[kernel.img2gray_cpu]")
    toml.write_text(text[:cpu] + text[cpu:].replace("depends = []", 'depends = ["cutlass_3_8"]', 1))
    binding = kernel_copy / "torch-ext" / "torch_binding.cpp"
    binding.write_text("#include <cutlass/cutlass.h>\n" + binding.read_text())
    build_dir = tmp_path / "build"
    result = kernel_matrix(
        "build", "--backend", "cpu", "--kernel-dir", str(kernel_copy), "--build-dir", str(build_dir),
        "--no-cache", "--no-load-check", env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    why = [ln for ln in result.stderr.splitlines() if "changed since they were fetched" in ln]
    assert len(why) == 1 and why[0].startswith(f"cutlass_3_8: the headers in {folder} have sha256 "), result.stderr
    (variant,) = [d for d in build_dir.iterdir() if (d / "metadata.json").is_file()]
    (library,) = variant.glob("*.so")
    assert HEADER_MARKER not in library.read_bytes()
    compiled = dependencies.tree_digest(folder / "include")
    assert compiled == pin.digest
    toolchain = json.loads((variant / "metadata.json").read_text())["provenance"]["toolchain"]
    assert toolchain["cutlass_3_8"] == f"CUTLASS 3.8.0, NVIDIA/cutlass@{pin.commit}, headers sha256:{compiled}"
