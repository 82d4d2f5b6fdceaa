"""bench/compare.py's commit stamp: the commit of a clean tree, marked -dirty where tracked files
differ from it (a copy of the tree whose .git lags behind its files must not claim that commit),
and FLASHCORE_COMMIT where the caller passes it."""
import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import compare  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def git(repo, *args):
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch):
    git(tmp_path, "init", "-q")
    (tmp_path / "kernel.cu").write_text("v1\n")
    git(tmp_path, "add", "kernel.cu")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    monkeypatch.setattr(compare, "REPO_ROOT", str(tmp_path))
    monkeypatch.delenv("FLASHCORE_COMMIT", raising=False)
    return tmp_path


def test_clean_tree_is_its_commit(repo):
    assert compare.git_commit() == git(repo, "rev-parse", "--short", "HEAD")


def test_changed_tracked_file_is_dirty(repo):
    (repo / "kernel.cu").write_text("v2\n")
    assert compare.git_commit() == git(repo, "rev-parse", "--short", "HEAD") + "-dirty"


def test_untracked_files_do_not_count(repo):
    (repo / "notes.txt").write_text("scratch\n")
    assert not compare.git_commit().endswith("-dirty")


def test_environment_wins(repo, monkeypatch):
    (repo / "kernel.cu").write_text("v2\n")
    monkeypatch.setenv("FLASHCORE_COMMIT", "abc1234")
    assert compare.git_commit() == "abc1234"


def test_no_repository_is_unknown(tmp_path, monkeypatch):
    monkeypatch.setattr(compare, "REPO_ROOT", str(tmp_path / "nowhere"))
    monkeypatch.delenv("FLASHCORE_COMMIT", raising=False)
    assert compare.git_commit() == "unknown"
