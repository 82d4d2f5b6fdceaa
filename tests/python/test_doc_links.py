"""Every relative link and image in the repository's markdown files points at a file or folder
that is part of the repository, and every markdown file a document names (README.md,
NOTES.md) exists in it.

A link to a file outside the tree (the design notes beside a developer's checkout, say) or to a
file that was moved or deleted shows up here instead of as a 404 for readers. Web links
(http, https, mailto, any other scheme) and pure #anchors are not checked; a #fragment or
?query is dropped before the path is resolved.

Needs neither the compiled module nor git: the files are `git ls-files '*.md'` when git is
there, else a walk of the tree that skips build folders. tests/python/conftest.py stops the
whole session when flashcore is not importable, so without a build run this file on its own:

    python3 -m pytest --noconftest tests/python/test_doc_links.py
    python3 tests/python/test_doc_links.py
"""

import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Folders the tree walk skips when git is not available (build outputs, environments, caches).
_SKIPPED_DIRS = re.compile(r"^(build.*|\..*|__pycache__|node_modules|dist|.*\.egg-info)$")

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"(`+).*?\1")
# [text](target) and ![alt](target); a link's text may hold an image ([![badge](x.svg)](y.md)),
# so images are also matched on their own.
_TARGET = r"\(\s*(<[^>]*>|[^)\s]*)(?:\s+[^)]*)?\)"
_INLINE_LINK = re.compile(r"\[(?:[^\[\]]|!?\[[^\[\]]*\]\([^)]*\))*\]" + _TARGET)
_IMAGE = re.compile(r"!\[[^\[\]]*\]" + _TARGET)
# [label]: target   (reference-style definitions)
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
# <img src="..."> and <a href="..."> in inline HTML
_HTML = re.compile(r"<(?:img|a|source)\b[^>]*?\b(?:src|href)\s*=\s*[\"']([^\"']+)[\"']", re.I)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# A markdown file named in prose without a folder ("see ARCHITECTURE.md"): a reference too.
_BARE_MD_NAME = re.compile(r"(?<![\w/.-])([\w-]+\.md)\b")


def _tracked_files():
    """Paths (relative, '/'-separated) of the repository's files, or None without git."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                                check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    files = [name for name in listed.stdout.decode().split("\0") if name]
    # A file deleted in the working tree but not yet in the index is not part of the tree.
    return {name for name in files if (ROOT / name).exists()} or None


def _walked_files():
    files = set()
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not _SKIPPED_DIRS.match(d)]
        for name in names:
            files.add((Path(folder) / name).relative_to(ROOT).as_posix())
    return files


def _repo_files():
    return _tracked_files() or _walked_files()


def _markdown_files(files):
    return sorted(name for name in files if name.lower().endswith(".md"))


def prose_without_code(text):
    """(line number, line) of the lines outside fenced code, with inline code removed."""
    in_fence = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            yield number, _INLINE_CODE.sub("", line)


def links_in(text):
    """(line number, target) of every link, image and reference definition outside code."""
    found = []
    for number, line in prose_without_code(text):
        targets = {}  # position of the target in the line -> target (an image matches twice)
        for pattern in (_INLINE_LINK, _IMAGE, _REFERENCE, _HTML):
            for match in pattern.finditer(line):
                targets[match.start(1)] = match.group(1).strip("<>").strip()
        found.extend((number, targets[start]) for start in sorted(targets))
    return found


def bare_md_names_in(text):
    """(line number, name) of every markdown file named in prose without a path."""
    return [(number, match.group(1)) for number, line in prose_without_code(text)
            for match in _BARE_MD_NAME.finditer(line)]


def local_path(target):
    """The repository-relative path part of a link target, or None when there is nothing to check
    (a web link, mailto, another scheme, a pure #anchor, an empty target)."""
    if not target or target.startswith("#") or target.startswith("//") or _SCHEME.match(target):
        return None
    path = unquote(re.split(r"[#?]", target, maxsplit=1)[0])
    return path or None


def resolve(source, path, files):
    """None when `path`, linked from the markdown file `source`, is a file or folder of the
    repository; else why not."""
    base = ROOT if path.startswith("/") else (ROOT / source).parent
    resolved = Path(os.path.normpath(base / path.lstrip("/")))
    try:
        relative = resolved.relative_to(ROOT).as_posix()
    except ValueError:
        return f"resolves to {resolved}, outside the repository"
    if relative in files:
        return None
    folder = "" if relative == "." else relative + "/"
    if any(name.startswith(folder) for name in files):
        return None  # a folder of the repository (GitHub lists it)
    return f"resolves to {relative}, which is not a file or folder of the repository"


def broken_links(files=None):
    """'file:line: target (why)' for every relative link that does not resolve."""
    files = _repo_files() if files is None else files
    problems = []
    for source in _markdown_files(files):
        text = (ROOT / source).read_text(encoding="utf-8", errors="replace")
        for number, target in links_in(text):
            path = local_path(target)
            if path is None:
                continue
            why = resolve(source, path, files)
            if why:
                problems.append(f"{source}:{number}: {target} ({why})")
    return problems


def missing_named_files(files=None):
    """'file:line: NAME.md' for every markdown file named in prose that the repository lacks
    (names are looked up anywhere in the tree: "see NOTES.md" next to a folder of NOTES.md)."""
    files = _repo_files() if files is None else files
    basenames = {name.rsplit("/", 1)[-1] for name in files}
    return [f"{source}:{number}: {name}"
            for source in _markdown_files(files)
            for number, name in bare_md_names_in(
                (ROOT / source).read_text(encoding="utf-8", errors="replace"))
            if name not in basenames]


def test_markdown_files_are_found():
    files = _repo_files()
    assert "README.md" in _markdown_files(files), "README.md not found: wrong repository root?"


def test_every_relative_link_resolves():
    problems = broken_links()
    assert not problems, "links that do not resolve to a file of the repository:\n" + "\n".join(
        problems)


def test_every_named_markdown_file_exists():
    """Issue 22: README named ARCHITECTURE.md and BENCHMARKS.md, which live beside the
    developers' checkout, not in the repository that users clone."""
    missing = missing_named_files()
    assert not missing, "markdown files named but not in the repository:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    "target, path",
    [
        ("docs/kernels.md", "docs/kernels.md"),
        ("docs/kernels.md#the-floors", "docs/kernels.md"),
        ("<docs/a b.md>", "docs/a b.md"),
        ("docs/a%20b.md", "docs/a b.md"),
        ("https://example.com/x.md", None),
        ("mailto:someone@example.com", None),
        ("#section", None),
        ("", None),
    ],
)
def test_local_path(target, path):
    assert local_path(target.strip("<>")) == path


def test_links_in_skips_code_and_finds_images_and_references():
    text = "\n".join([
        "See [the notebook](docs/kernels.md) and ![plot](docs/p.png \"title\").",
        "`[not a link](nowhere.md)` in code",
        "```",
        "[also not](nowhere.md)",
        "```",
        "[ref]: docs/architecture.md",
        '<img src="docs/q.png" width="300">',
        "[![badge](img.svg)](docs/target.md)",
    ])
    assert [target for _, target in links_in(text)] == [
        "docs/kernels.md", "docs/p.png", "docs/architecture.md", "docs/q.png", "img.svg",
        "docs/target.md"]


def test_bare_md_names_in():
    text = "See ARCHITECTURE.md, [x](docs/a.md), docs/b.md and `CODE.md`.\n```\nFENCE.md\n```"
    assert bare_md_names_in(text) == [(1, "ARCHITECTURE.md")]


def test_resolve_rejects_outside_and_missing_files():
    files = {"README.md", "docs/kernels.md", "docs/results/latest/table.md"}
    assert resolve("README.md", "docs/kernels.md", files) is None
    assert resolve("docs/kernels.md", "../README.md", files) is None
    assert resolve("docs/kernels.md", "results/", files) is None  # a folder with files
    assert resolve("README.md", "/docs/kernels.md", files) is None
    assert "outside the repository" in resolve("README.md", "../shared/ARCHITECTURE.md", files)
    assert "not a file" in resolve("README.md", "ARCHITECTURE.md", files)
    assert "not a file" in resolve("README.md", "docs/missing.md", files)


if __name__ == "__main__":
    broken = broken_links() + missing_named_files()
    print("\n".join(broken) if broken else "every relative link resolves")
    sys.exit(1 if broken else 0)
