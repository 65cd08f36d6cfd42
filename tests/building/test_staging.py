"""variant_dir.staged: a variant is assembled beside its place and replaces it whole, or
nothing of it is left (an interrupted build leaves no staging folder)."""

from pathlib import Path

import pytest

from kernel_matrix.building import variant_dir
from kernel_matrix.building.variant_dir import staged


def test_a_staged_variant_replaces_the_old_one_whole(tmp_path):
    final = tmp_path / "v"
    final.mkdir()
    (final / "old").write_text("old")
    with staged(final) as stage:
        (stage / "new").write_text("new")
    assert sorted(p.name for p in final.iterdir()) == ["new"]
    assert [p.name for p in tmp_path.iterdir()] == ["v"]


def test_an_interrupt_just_after_the_staging_folder_is_made_leaves_nothing(tmp_path, monkeypatch):
    """Ctrl-C as a build starts: the signal lands right after the folder exists (a full run's
    test_an_interrupted_build_leaves_nothing_partial found one left behind, made before the
    cleanup's try)."""
    make = Path.mkdir

    def made_then_interrupted(self, *args, **kwargs):
        make(self, *args, **kwargs)
        if ".staging-" in self.name:
            raise KeyboardInterrupt

    monkeypatch.setattr(Path, "mkdir", made_then_interrupted)
    with pytest.raises(KeyboardInterrupt), staged(tmp_path / "v"):
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_staging_name_already_taken_is_refused_and_left_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(variant_dir.secrets, "token_hex", lambda n: "0" * (2 * n))
    taken = tmp_path / f".v.staging-{'0' * 16}"
    taken.mkdir()
    (taken / "theirs").write_text("x")
    with pytest.raises(FileExistsError), staged(tmp_path / "v"):
        pass
    assert (taken / "theirs").read_text() == "x"
