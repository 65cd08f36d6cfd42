"""Issue 23's high finding, replayed on a real engine: a kernel's build forges an
object-cache entry for another kernel's compile (the key computed with
kernel-matrix's own planner, its own object with an added constructor, one listed
input that never changes). Before the fix the victim's next build took that
object ("1 of 3 cached") and shipped the attacker's code; now caches are scoped by
kernel and trust, so the victim's variant is byte-identical to a --no-cache build."""

import shutil
import textwrap

import pytest
from conftest import KERNEL_DIR, container_build_cli

pytestmark = pytest.mark.build

FORGE = textwrap.dedent(
    """
    import hashlib, json, os, subprocess, tempfile
    from pathlib import Path
    from kernel_matrix.building.native_build import plan_build, build_steps
    from kernel_matrix.building.objcache import ObjectCache

    os.environ.pop("SOURCE_DATE_EPOCH", None)  # the compiler's environment, not the build's
    victim = Path("/src/victim")
    plan = plan_build(victim, backend="cuda", cuda_capabilities=["9.0"])
    work = Path(tempfile.mkdtemp())
    compiles, _ = build_steps(plan, work, work / "x.so")
    step = next(s for s in compiles if s.label.endswith("img2gray_cpu.cpp"))
    # In the victim's container its kernel is /src, as this one is here.
    argv = [a.replace("/src/victim", "/src") for a in step.argv]
    key = ObjectCache(Path("/nowhere"))._key(argv, step.output, list(step.compilers))
    # The attacker's object: the victim's compile of this kernel's own (hostile) source.
    forged = work / "forged.o"
    subprocess.run([a if a != str(step.output) else str(forged) for a in argv], check=True, cwd="/src")
    data = forged.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    staged = Path("/out/.cache-new")
    (staged / "objects").mkdir(parents=True, exist_ok=True)
    (staged / "objects" / digest).write_bytes(data)
    listed = "/opt/kernel-matrix/kernel_matrix/include/registration.h"
    entry = {"inputs": {listed: hashlib.sha256(Path(listed).read_bytes()).hexdigest()}, "object": digest}
    manifest = staged / "manifests" / key[:2] / f"{key}.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps([entry]))
    print("forged", key)
    """
)


def evil_kernel(tmp_path, cell_name: str):
    """img2gray renamed `evil`, a constructor added to its CPU source, and every compile run
    through a wrapper that forges the victim's entry once."""
    evil = tmp_path / "evil"
    shutil.copytree(KERNEL_DIR, evil, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(KERNEL_DIR, evil / "victim", ignore=shutil.ignore_patterns("__pycache__"))
    source = evil / "csrc" / "img2gray_cpu.cpp"
    source.write_text(source.read_text() + "\n__attribute__((constructor)) static void pwned() { __builtin_trap(); }\n")
    (evil / "forge.py").write_text(FORGE)
    wrapper = evil / "w.sh"
    wrapper.write_text(
        "#!/bin/sh\n"
        "if mkdir /out/.forged 2>/dev/null; then\n"
        f"  mkdir -p /out/logs; /opt/km/bin/python /src/forge.py >> /out/logs/{cell_name}.forge.txt 2>&1\n"
        "fi\n"
        'exec "$@"\n'
    )
    wrapper.chmod(0o755)
    toml = evil / "build.toml"
    (evil / "torch-ext" / "img2gray").rename(evil / "torch-ext" / "evil")  # the package its name says
    text = toml.read_text().replace('name = "img2gray"', 'name = "evil"', 1)
    assert text.count('cxx-flags = ["-ffp-contract=off"]') == 2
    toml.write_text(text.replace('cxx-flags = ["-ffp-contract=off"]', 'cxx-flags = ["-wrapper", "/src/w.sh"]'))
    return evil


def test_a_kernels_build_cannot_put_its_code_into_another_kernels_variant(local_cuda_cell, tmp_path):
    cell, cache = local_cuda_cell, tmp_path / "shared-cache"
    evil = container_build_cli(
        cell, tmp_path / "evil-build", evil_kernel(tmp_path, cell.name), "--cache-dir", str(cache)
    )
    assert evil.returncode == 0, evil.stdout + evil.stderr
    assert "forged" in (tmp_path / "evil-build" / "logs" / f"{cell.name}.forge.txt").read_text()

    victim = container_build_cli(cell, tmp_path / "victim-build", KERNEL_DIR, "--cache-dir", str(cache))
    assert victim.returncode == 0, victim.stdout + victim.stderr
    reference = container_build_cli(cell, tmp_path / "reference", KERNEL_DIR, "--no-cache")
    assert reference.returncode == 0, reference.stdout + reference.stderr

    (built,) = (tmp_path / "victim-build" / cell.name).glob("*.so")
    (clean,) = (tmp_path / "reference" / cell.name).glob("*.so")
    assert built.read_bytes() == clean.read_bytes()
    # The victim compiled everything itself: nothing came from the cache the attacker wrote into.
    assert "| 0 of " in (tmp_path / "victim-build" / "summary.md").read_text()
