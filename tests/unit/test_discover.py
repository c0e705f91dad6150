"""Unit tests for tasks/discover/files.py: globs, hidden files, symlinks, fingerprints, batches."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tasks.common.config import IngestParams, LoaderOptions
from tasks.common.documents import FileRef, file_sha256, printable_name
from tasks.common.errors import ConfigError
from tasks.discover import files as discover_module
from tasks.discover.batches import BatchLimits, estimate_chunks, plan_batches, spread_by_type
from tasks.discover.files import discover
from tasks.discover.plan import limits_of
from tasks.load.batch import load_batch


def sources(
    root: Path, include: list[str], exclude: list[str] | None = None, **kw: bool
) -> list[str]:
    return [f.source for f in discover(root, include, exclude or [], **kw)]


def write(root: Path, rel: str, text: str = "x\n") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# -- globs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("include", "exclude", "expected"),
    [
        pytest.param(
            ["**/*.md", "**/*.txt"],
            [],
            {"intro.md", "guides/keeper.txt", "guides/deep/fog.md"},
            id="two-includes",
        ),
        pytest.param(
            ["**/*.md", "**/*.txt", "**/*.csv"],
            ["guides/deep/**", "*.csv"],
            {"intro.md", "guides/keeper.txt"},
            id="three-includes-two-excludes",
        ),
        pytest.param(
            ["**/*"],
            ["**/*.md", "**/*.csv"],
            {"guides/keeper.txt"},
            id="everything-but-two-types",
        ),
        pytest.param(
            ["guides/**"],
            ["**/keeper.txt"],
            {"guides/deep/fog.md"},
            id="folder-include-file-exclude",
        ),
        pytest.param(["*.md"], [], {"intro.md"}, id="no-globstar-is-top-level-only"),
        pytest.param(
            ["**/*.{md,txt}"],
            ["guides/{deep,x}/**"],
            {"intro.md", "guides/keeper.txt"},
            id="braces-as-in-a-shell",
        ),
        pytest.param(["**/*.pdf"], [], set(), id="no-match"),
    ],
)
def test_several_includes_and_excludes(
    tiny_corpus: Path, include: list[str], exclude: list[str], expected: set[str]
) -> None:
    found = sources(tiny_corpus, include, exclude)
    assert set(found) == expected
    assert len(found) == len(expected)  # no file listed twice when several includes match it


def test_globstar_matches_top_level_and_nested(tiny_corpus: Path) -> None:
    write(tiny_corpus, "a/b/c/d/deepest.md")
    found = sources(tiny_corpus, ["**/*.md"])
    assert set(found) == {"intro.md", "guides/deep/fog.md", "a/b/c/d/deepest.md"}


# -- hidden files and folders ---------------------------------------------------------------


def test_hidden_files_and_folders_skipped_by_default(tiny_corpus: Path) -> None:
    write(tiny_corpus, "guides/.draft.md")
    write(tiny_corpus, "guides/.cache/inner.md")
    found = sources(tiny_corpus, ["**/*"])
    assert set(found) == {"intro.md", "notes.csv", "guides/keeper.txt", "guides/deep/fog.md"}
    assert not any(part.startswith(".") for s in found for part in s.split("/"))


def test_hidden_files_and_folders_included_when_asked(tiny_corpus: Path) -> None:
    write(tiny_corpus, "guides/.draft.md")
    write(tiny_corpus, "guides/.cache/inner.md")
    found = set(sources(tiny_corpus, ["**/*"], include_hidden=True))
    hidden = {".hidden/secret.md", ".dotfile.txt", "guides/.draft.md", "guides/.cache/inner.md"}
    assert hidden <= found
    assert {"intro.md", "guides/deep/fog.md"} <= found
    assert set(sources(tiny_corpus, ["**/*.md"], include_hidden=True)) == {
        "intro.md",
        "guides/deep/fog.md",
        ".hidden/secret.md",
        "guides/.draft.md",
        "guides/.cache/inner.md",
    }


# -- symbolic links -------------------------------------------------------------------------


@pytest.fixture
def linked_root(tmp_path: Path) -> Path:
    """A root with links to a file and a folder inside it and outside it."""
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    write(root, "top.md", "top\n")
    write(root, "sub/inner.md", "inner\n")
    write(outside, "out.md", "out\n")
    write(outside, "folder/far.md", "far\n")
    os.symlink(root / "top.md", root / "file_in.md")
    os.symlink(outside / "out.md", root / "file_out.md")
    os.symlink(root / "sub", root / "dir_in")
    os.symlink(outside / "folder", root / "dir_out")
    return root


@pytest.mark.parametrize(
    ("link_source", "followed"),
    [
        pytest.param("file_in.md", True, id="file-inside"),
        pytest.param("file_out.md", False, id="file-outside"),
        pytest.param(
            "dir_in/inner.md",
            True,
            id="folder-inside",
        ),
        pytest.param("dir_out/far.md", False, id="folder-outside"),
    ],
)
def test_symlinks_followed_only_inside_root(
    linked_root: Path, link_source: str, followed: bool
) -> None:
    found = {f.source: f for f in discover(linked_root, ["**/*.md"])}
    assert {"top.md", "sub/inner.md"} <= set(found)
    assert (link_source in found) is followed
    if followed:
        target = (linked_root / link_source).resolve()
        assert found[link_source].sha256 == hashlib.sha256(target.read_bytes()).hexdigest()
    # nothing from outside the root ever shows up, under any name
    assert not any(
        Path(f.path).resolve().is_relative_to(linked_root.parent / "outside")
        for f in found.values()
    )


def test_links_not_followed_are_reported_with_why(linked_root: Path) -> None:
    os.symlink(linked_root / "gone.md", linked_root / "broken.md")
    os.symlink(linked_root, linked_root / "sub" / "loop")  # a loop inside: nothing to say
    unfollowed: list[str] = []
    found = [f.source for f in discover(linked_root, ["**/*.md"], unfollowed=unfollowed)]
    assert "broken.md" not in found
    assert unfollowed == [
        "broken.md (leads nowhere)",
        "file_out.md (leads out of the source folder)",
        "dir_out/ (leads out of the source folder)",
    ]
    # links whose files the globs do not want are not reported
    for include, exclude in [
        (["sub/**/*.md", "*.txt"], []),  # not under dir_out/, and *.txt only at the top
        (["**/*.md"], ["dir_out/**", "*_out.md", "broken.md"]),
        (["**/*.txt"], ["dir_out"]),
    ]:
        unfollowed = []
        discover(linked_root, include, exclude, unfollowed=unfollowed)
        assert unfollowed == [], (include, exclude)
    unfollowed = []
    discover(linked_root, ["dir_out/*.md"], unfollowed=unfollowed)
    assert unfollowed == ["dir_out/ (leads out of the source folder)"]


def test_a_run_warns_of_the_links_it_does_not_follow(linked_root: Path, tmp_path: Path) -> None:
    from tasks.common.config import IngestParams
    from tasks.discover.plan import plan_files

    params = IngestParams(source=str(linked_root), data_dir=str(tmp_path / "data"))
    out = "(leads out of the source folder)"
    assert plan_files(params, dict, False).warnings == (
        f"2 symbolic link(s) under {linked_root} not followed: file_out.md {out}, "
        f"dir_out/ {out}; --exclude them to silence this",
    )
    for name in ("a", "b", "c"):
        os.symlink(linked_root / "gone", linked_root / f"{name}.md")
    assert plan_files(params, dict, False).warnings == (
        f"5 symbolic link(s) under {linked_root} not followed: a.md (leads nowhere), "
        "b.md (leads nowhere), c.md (leads nowhere) and 2 more; --exclude them to silence this",
    )


def test_link_loop_does_not_hang(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write(root, "a/doc.md")
    os.symlink(root, root / "a" / "loop")
    assert sources(root, ["**/*.md"]) == ["a/doc.md"]


# -- order ----------------------------------------------------------------------------------


def _tree(root: Path, names: list[str]) -> None:
    for name in names:
        write(root, name, name)


NAMES = ["b.md", "a/z.md", "a/b/c.md", "c.md", "A.md", "a/a.md", "z/y/x.md", "a.md"]


def test_skipped_folders_are_not_walked_by_their_name_or_a_link(tmp_path: Path) -> None:
    _tree(tmp_path, ["doc.md", "data/tables/x.md", "data/deeper/y.md", "database.md"])
    everything = ["**/*.md"]
    assert sorted(sources(tmp_path, everything)) == [
        "data/deeper/y.md", "data/tables/x.md", "database.md", "doc.md",
    ]  # fmt: skip
    found = [f.source for f in discover(tmp_path, everything, skip=[tmp_path / "data"])]
    assert found == ["database.md", "doc.md"]  # the folder, not a name that starts the same
    (tmp_path / "state").symlink_to(tmp_path / "data")  # given by another name: still skipped
    found = [f.source for f in discover(tmp_path, everything, skip=[tmp_path / "state"])]
    assert found == ["database.md", "doc.md"]


def test_order_is_stable_and_independent_of_creation_order(tmp_path: Path) -> None:
    _tree(tmp_path / "one", NAMES)
    _tree(tmp_path / "two", list(reversed(NAMES)))
    first = sources(tmp_path / "one", ["**/*.md"])
    assert sorted(first) == sorted(NAMES)
    assert first == sources(tmp_path / "one", ["**/*.md"])
    assert first == sources(tmp_path / "two", ["**/*.md"])


def test_order_is_sorted_by_source(tmp_path: Path) -> None:
    _tree(tmp_path, NAMES)
    found = sources(tmp_path, ["**/*.md"])
    assert found == sorted(found)


# -- fingerprints ---------------------------------------------------------------------------


def test_file_ref_fields(tiny_corpus: Path) -> None:
    refs = {f.source: f for f in discover(tiny_corpus, ["**/*.md", "**/*.txt"])}
    assert set(refs) == {"intro.md", "guides/keeper.txt", "guides/deep/fog.md"}
    for source, ref in refs.items():
        path = tiny_corpus / source
        data = path.read_bytes()
        assert "\\" not in ref.source and not ref.source.startswith("/")
        assert Path(ref.path).is_absolute()
        assert Path(ref.path) == path.resolve()
        assert ref.size == len(data)
        assert ref.mtime == path.stat().st_mtime
        assert ref.sha256 == hashlib.sha256(data).hexdigest()
    assert refs["guides/deep/fog.md"].extension == ".md"
    assert refs["guides/keeper.txt"].extension == ".txt"


def test_sha256_of_file_larger_than_one_read_block(tmp_path: Path) -> None:
    data = os.urandom((5 << 19) + 17)  # 2.5 MiB and a bit: three 1 MiB blocks
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    assert file_sha256(path) == hashlib.sha256(data).hexdigest()
    [ref] = discover(tmp_path, ["*.bin"])
    assert ref.size == len(data)
    assert ref.sha256 == hashlib.sha256(data).hexdigest()


def test_upper_case_extension_is_lowered() -> None:
    ref = FileRef(path="/x/README.MD", source="README.MD", size=1, mtime=0.0, sha256="0")
    assert ref.extension == ".md"
    assert FileRef("/x/Makefile", "Makefile", 1, 0.0, "0").extension == ""


# -- batches --------------------------------------------------------------------------------


def refs(sizes: list[int]) -> list[FileRef]:
    return [FileRef(f"/r/f{i}", f"f{i}", s, 0.0, f"{i:064x}") for i, s in enumerate(sizes)]


@pytest.mark.parametrize(
    ("sizes", "max_files", "max_bytes", "expected"),
    [
        pytest.param([1] * 7, 3, 10**9, [3, 3, 1], id="by-count"),
        pytest.param([1] * 6, 3, 10**9, [3, 3], id="by-count-exact"),
        pytest.param([10, 10, 10, 10], 100, 25, [2, 2], id="by-bytes"),
        pytest.param([10, 15, 5], 100, 25, [2, 1], id="by-bytes-exact-fill"),
        pytest.param([10, 10, 50, 10], 100, 25, [2, 1, 1], id="big-file-alone"),
        pytest.param([50, 10, 10], 100, 25, [1, 2], id="big-file-first"),
        pytest.param([10, 50, 60, 10], 100, 25, [1, 1, 1, 1], id="two-big-files"),
        pytest.param([5, 5, 5, 5, 5], 2, 12, [2, 2, 1], id="count-and-bytes"),
        pytest.param([], 3, 10, [], id="empty"),
    ],
)
def test_plan_batches(
    sizes: list[int], max_files: int, max_bytes: int, expected: list[int]
) -> None:
    files = refs(sizes)
    batches = plan_batches(files, BatchLimits(max_files, max_bytes, chunks=10**9))
    assert [len(b) for b in batches] == expected
    assert [f for b in batches for f in b] == files  # order kept, nothing lost or duplicated
    for batch in batches:
        assert batch and len(batch) <= max_files
        assert sum(f.size for f in batch) <= max_bytes or len(batch) == 1


def test_file_larger_than_max_bytes_is_alone_in_its_batch() -> None:
    files = refs([3, 4, 100, 2, 1])
    batches = plan_batches(files, BatchLimits(10, 10, chunks=10**9))
    [big_batch] = [b for b in batches if files[2] in b]
    assert big_batch == [files[2]]


def test_batches_are_cut_by_estimated_chunks_and_start_small() -> None:
    # 600 bytes of text = one chunk of 600 characters; the first batch aims at a quarter
    # of 8 chunks, the second at half, the rest at all 8
    files = refs([600] * 16)
    batches = plan_batches(files, BatchLimits(100, 10**9, chunks=8, chunk_chars=600))
    assert [len(b) for b in batches] == [2, 4, 8, 2]
    big = refs([600, 600 * 20, 600])  # a file over the target is a batch of its own
    assert [len(b) for b in plan_batches(big, BatchLimits(100, 10**9, 8, 600))] == [1, 1, 1]


def test_small_files_fill_batches_by_chunks_under_the_default_limits() -> None:
    """5,000 one-chunk notes: batches of a quarter, half, then all of ``batch_chunks``, not
    79 batches of 64 files (what a batch costs beyond its chunks then added up)."""
    params = IngestParams()
    limits = limits_of(params)
    batches = plan_batches(refs([120] * 5000), limits)
    chunks = params.batch_chunks
    assert [len(b) for b in batches] == [chunks // 4, chunks // 2, *[chunks] * 4, 250]


def typed(names: list[str]) -> list[FileRef]:
    return [FileRef(f"/r/{n}", n, 600, 0.0, f"{i:064x}") for i, n in enumerate(names)]


def test_each_type_is_spread_through_the_run_in_proportion() -> None:
    """Four Markdown files of a chunk each, then two PDFs of two: in path order both PDFs
    came last; spread, each type has given the same share of its chunks at every point."""
    files = typed(["a.md", "b.md", "c.md", "d.md", "x.pdf", "y.pdf"])
    order = spread_by_type(files, [1, 1, 1, 1, 2, 2])
    assert [files[i].source for i in order] == ["a.md", "x.pdf", "b.md", "c.md", "y.pdf", "d.md"]


def test_batches_mix_the_types_a_folder_kept_together() -> None:
    files = typed([*(f"{i:02}.md" for i in range(8)), *(f"{i:02}.pdf" for i in range(8))])
    batches = plan_batches(files, BatchLimits(4, 10**9, chunks=10**9))
    assert [sorted({f.extension for f in b}) for b in batches] == [[".md", ".pdf"]] * 4
    assert sorted(f.source for b in batches for f in b) == sorted(f.source for f in files)


@given(st.lists(st.tuples(st.sampled_from([".md", ".pdf", ".csv"]), st.integers(1, 50))))
def test_spreading_keeps_every_file_once_and_each_types_order(
    specs: list[tuple[str, int]],
) -> None:
    files = typed([f"{i:03}{ext}" for i, (ext, _) in enumerate(specs)])
    order = spread_by_type(files, [n for _, n in specs])
    assert sorted(order) == list(range(len(files)))
    for ext in {".md", ".pdf", ".csv"}:
        kept = [i for i in order if files[i].extension == ext]
        assert kept == sorted(kept)
    if len({ext for ext, _ in specs}) == 1:
        assert order == list(range(len(files)))  # one type: the path order, unchanged


def test_estimated_chunks_follow_text_not_markup(tmp_path: Path) -> None:
    text = FileRef("/r/a.md", "a.md", 6000, 0.0, "0")
    html = FileRef("/r/a.html", "a.html", 6000, 0.0, "0")
    pdf = FileRef("/r/a.pdf", "a.pdf", 120_000, 0.0, "0")
    assert estimate_chunks(text, 600) == 10
    assert estimate_chunks(html, 600) == 3  # mostly markup
    assert estimate_chunks(pdf, 600) == 10  # mostly fonts, images, compressed streams
    assert estimate_chunks(FileRef("/r/e.txt", "e.txt", 0, 0.0, "0"), 600) == 1
    rows = write(tmp_path, "rows.csv", "name,size\n" + "bee,1\n" * 50)
    csv = FileRef(str(rows), "rows.csv", rows.stat().st_size, 0.0, "0")
    assert estimate_chunks(csv, 600) == 51  # one document (at least a chunk) per row


def test_batch_limits_count_the_new_text_of_a_chunk() -> None:
    assert BatchLimits.for_chunks(64, 10, 1000, 200, 50, "model_tokens").chunk_chars == 600
    assert BatchLimits.for_chunks(64, 10, 1000, 1000, 200, "chars").chunk_chars == 800
    assert BatchLimits.for_chunks(64, 10, 1000, 10, 10, "tokens").chunk_chars == 1


# -- errors ---------------------------------------------------------------------------------


def test_missing_root_raises_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match="nope"):
        discover(missing, ["**/*"])


def test_root_that_is_a_file_raises_config_error(tmp_path: Path) -> None:
    path = write(tmp_path, "file.md")
    with pytest.raises(ConfigError):
        discover(path, ["**/*"])


# -- unreadable and vanishing files ---------------------------------------------------------


def _failing_hash(
    monkeypatch: pytest.MonkeyPatch, name: str, action: Callable[[Path], None]
) -> None:
    """Make hashing ``name`` run ``action`` first (raise, or delete the file)."""
    real = discover_module.file_sha256

    def fake(path: Path) -> str:
        if path.name == name:
            action(path)
        return real(path)

    monkeypatch.setattr(discover_module, "file_sha256", fake)


def _deny(path: Path) -> None:
    raise PermissionError(13, "Permission denied", str(path))


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        pytest.param(_deny, "unreadable: permission denied", id="permission-denied"),
        pytest.param(Path.unlink, "vanished during the run", id="vanished"),
    ],
)
def test_unreadable_file_is_returned_with_reason_and_others_go_on(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    action: Callable[[Path], None],
    reason: str,
) -> None:
    for name in ("a.md", "b.md", "c.md"):
        write(tmp_path, name)
    _failing_hash(monkeypatch, "b.md", action)
    a, b, c = discover(tmp_path, ["*.md"])
    assert [a.source, b.source, c.source] == ["a.md", "b.md", "c.md"]
    assert a.error is None and c.error is None and len(a.sha256) == 64
    assert b.error == reason and b.sha256 == ""


def test_file_gone_before_stat_is_vanished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "a.md")
    listed = list(discover_module.iter_matches(tmp_path, ["*.md"]))
    monkeypatch.setattr(
        discover_module, "iter_matches", lambda *a, **k: iter([*listed, tmp_path / "gone.md"])
    )
    a, gone = discover(tmp_path, ["*.md"])
    assert a.error is None
    assert (gone.source, gone.error, gone.size) == ("gone.md", "vanished during the run", 0)


@pytest.mark.parametrize("workers", [0, 1])
def test_unreadable_file_becomes_a_failed_row_and_the_batch_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    for name in ("a.md", "b.md", "c.md"):
        write(tmp_path, name, f"# {name}\n\nsome text\n")
    _failing_hash(monkeypatch, "b.md", _deny)
    files = discover(tmp_path, ["*.md"])
    rows = load_batch(files, LoaderOptions(workers=workers))
    assert [(r.source, r.status, r.error) for r in rows] == [
        ("a.md", "loaded", None),
        ("b.md", "failed", "unreadable: permission denied"),
        ("c.md", "loaded", None),
    ]


@pytest.mark.parametrize(
    "pattern",
    [
        "**/*.md",
        "a[bc]d.txt",
        "[!a]x",
        "[]]",
        "a\\[b",
        "**/[a-z]*.md",
        "!drafts/**",
        "**/*.{md,txt}",
    ],
)
def test_well_formed_globs_pass(pattern: str) -> None:
    from tasks.discover.files import check_glob

    check_glob(pattern)


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("[", "'[' at 0 is never closed"),
        ("docs/[a-z.md", "'[' at 5 is never closed"),
        ("a[b/c]", "never closed"),
        ("notes\\", "it ends with '\\'"),
        ("  ", "is empty"),
        ("{1..9999}{1..999}.md", "Pattern limit exceeded"),  # braces that expand too far
    ],
)
def test_malformed_globs_are_config_errors(pattern: str, reason: str) -> None:
    from tasks.discover.files import check_glob

    with pytest.raises(ConfigError, match=re.escape(reason)):
        check_glob(pattern, "--exclude")


def test_unmatched_names_the_patterns_that_select_nothing() -> None:
    from tasks.common.documents import FileRef
    from tasks.discover.files import unmatched

    files = [FileRef(f"/r/{s}", s, 1, 0.0, "x") for s in ("a.md", "docs/b.txt")]
    assert unmatched(files, ["**/*.md", "**/*.pdf", "docs/*.txt", "x/**"]) == ["**/*.pdf", "x/**"]
    assert unmatched([], ["**/*.md"]) == ["**/*.md"]


def test_a_name_that_is_not_utf8_gets_a_printable_source_and_still_loads(tmp_path: Path) -> None:
    """A Latin-1 name (bytes ``caf\\xe9``) failed the whole run: no table can hold it."""
    try:
        (Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9.txt"))).write_bytes(b"legacy name\n")
    except (OSError, UnicodeError) as exc:  # a file system that only takes UTF-8 names
        pytest.skip(f"cannot create a file whose name is not UTF-8 here: {exc}")
    (tmp_path / "café.md").write_text("# Caf\u00e9\n\nutf-8 name\n", encoding="utf-8")
    refs = {f.source: f for f in discover(tmp_path, ["*"])}
    assert set(refs) == {"caf\\xe9.txt", "café.md"}  # a UTF-8 name is left as it is
    assert printable_name("guides/café.md") == "guides/café.md"
    rows = load_batch([refs["caf\\xe9.txt"]], LoaderOptions(workers=0))
    assert [r.status for r in rows] == ["loaded"]
    meta = rows[0].document.metadata if rows[0].document else {}
    assert meta["source"] == "caf\\xe9.txt" and meta["file_name"] == "caf\\xe9.txt"
    assert meta["file_path"].endswith("/caf\\xe9.txt")
    for value in (meta["source"], meta["file_path"]):
        value.encode("utf-8")  # what the tables, the store and the logs write


def test_an_include_that_names_a_folder_says_how_to_select_its_files(
    tiny_corpus: Path, data_dir: Path
) -> None:
    """``--include guides`` matched nothing with no hint of why."""
    from tasks.common.config import IngestParams
    from tasks.discover.plan import plan_task

    params = IngestParams(
        source=str(tiny_corpus), include=["guides", "**/*.md"], data_dir=str(data_dir)
    )
    plan = plan_task.fn(params, "docflow", False)
    assert plan.warnings == (
        f"--include 'guides' matched no file under {tiny_corpus} (a folder: write 'guides/**')",
    )
