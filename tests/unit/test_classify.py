"""Unit tests for the incremental plan of tasks/discover/files.py: ``classify`` and ``in_scope``."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from tasks.common.documents import FileRef
from tasks.discover.files import Changes, classify, discover, in_scope
from tasks.index.manifest import FileState

ROOT = "/corpus"
FP = "fp-1"
INCLUDE = ["**/*.md", "**/*.txt"]


def ref(source: str, sha: str = "sha-1") -> FileRef:
    return FileRef(path=f"{ROOT}/{source}", source=source, size=1, mtime=0.0, sha256=sha)


def state(
    source: str,
    sha: str = "sha-1",
    fingerprint: str = FP,
    status: str = "done",
    root: str = ROOT,
    attempt: str = "",
) -> FileState:
    return FileState(source, root, sha, fingerprint, status, None, ("c1",), (), "run-0", attempt)


def scope(include: list[str] = INCLUDE, exclude: list[str] | None = None) -> Callable[[str], bool]:
    return lambda s: in_scope(s, include, exclude or [], False)


@pytest.mark.parametrize(
    ("known", "full_refresh", "todo", "counts"),
    [
        pytest.param(None, False, True, (1, 0, 0, 0), id="new"),
        pytest.param(state("a.md", sha="sha-0"), False, True, (0, 1, 0, 0), id="sha-differs"),
        pytest.param(state("a.md", fingerprint="fp-0"), False, True, (0, 1, 0, 0), id="fp-differs"),
        pytest.param(state("a.md"), False, False, (0, 0, 1, 0), id="unchanged"),
        pytest.param(
            state("a.md", status="pending"), False, True, (0, 0, 0, 1), id="pending-retry"
        ),
        pytest.param(
            state("a.md", status="pending", sha="sha-0"),
            False,
            True,
            (0, 1, 0, 0),
            id="pending-and-changed",
        ),
        pytest.param(
            state("a.md", status="failed", sha="", attempt="sha-1"),
            False,
            True,
            (0, 0, 0, 1),
            id="failed-retry",
        ),
        pytest.param(
            state("a.md", status="failed", attempt="sha-0"),
            False,
            True,
            (0, 1, 0, 0),
            id="failed-then-changed",
        ),
        pytest.param(state("a.md"), True, True, (0, 0, 1, 0), id="full-refresh-unchanged"),
        pytest.param(
            state("a.md", sha="sha-0"), True, True, (0, 1, 0, 0), id="full-refresh-changed"
        ),
    ],
)
def test_classify_one_file(
    known: FileState | None, full_refresh: bool, todo: bool, counts: tuple[int, int, int, int]
) -> None:
    f = ref("a.md")
    rows = {"a.md": known} if known else {}
    changes = classify([f], rows, ROOT, FP, scope(), full_refresh=full_refresh)
    assert changes.todo == ([f] if todo else [])
    assert (changes.new, changes.changed, changes.unchanged, changes.retried) == counts
    assert changes.deleted == []
    # why the file is to do (ingest --dry-run prints it): its count's name; an unchanged
    # file is to do only in a full refresh
    kind = ("new", "changed", "unchanged", "retried")[counts.index(1)]
    assert changes.why == ({"a.md": kind.replace("unchanged", "refresh")} if todo else {})


def test_classify_keeps_discovery_order_in_todo() -> None:
    files = [ref("a.md"), ref("b.md", sha="new"), ref("c.md"), ref("d.md")]
    known = {
        "b.md": state("b.md"),
        "c.md": state("c.md"),
        "d.md": state("d.md", status="failed", attempt="sha-1"),
    }
    changes = classify(files, known, ROOT, FP, scope())
    assert [f.source for f in changes.todo] == ["a.md", "b.md", "d.md"]
    assert (changes.new, changes.changed, changes.unchanged, changes.retried) == (1, 1, 1, 1)


def test_deleted_only_for_rows_of_this_root_in_scope() -> None:
    known = {
        "present.md": state("present.md"),
        "z-gone.md": state("z-gone.md"),
        "deep/gone.txt": state("deep/gone.txt", status="failed"),
        "elsewhere.md": state("elsewhere.md", root="/other-root"),
        "table.csv": state("table.csv"),  # outside the include globs
        "drafts/wip.md": state("drafts/wip.md"),  # excluded
        ".hidden/secret.md": state(".hidden/secret.md"),  # hidden, not asked for
    }
    changes = classify(
        [ref("present.md")], known, ROOT, FP, scope(INCLUDE, ["drafts/**"]), full_refresh=True
    )
    assert changes.deleted == ["deep/gone.txt", "z-gone.md"]
    assert [f.source for f in changes.todo] == ["present.md"]


@pytest.mark.parametrize("old_folder_gone", [True, False])
def test_a_moved_root_is_recorded_here_and_its_lost_files_deleted_once_its_folder_is_gone(
    old_folder_gone: bool,
) -> None:
    """A folder that moved: its rows name the old root. Gone, the old root is this one;
    still there, it is another folder of the same collection, left alone."""
    old, unrelated = "/mnt/old-share", "/mnt/unmounted"
    known = {
        "kept.md": state("kept.md", root=old),
        "edited.md": state("edited.md", root=old),
        "lost-in-move.md": state("lost-in-move.md", root=old),
        "other.md": state("other.md", root=unrelated),  # none of its files are here
        "mine-gone.md": state("mine-gone.md"),
    }
    files = [ref("edited.md", sha="sha-2"), ref("kept.md")]
    changes = classify(files, known, ROOT, FP, scope(), folder_gone=lambda r: old_folder_gone)
    assert [f.source for f in changes.todo] == ["edited.md"]  # its commit records this root
    assert (changes.changed, changes.unchanged) == (1, 1)
    assert changes.rerooted == ("kept.md",)  # not read again: only its row moves
    if old_folder_gone:
        assert changes.moved_from == (old,)
        assert changes.deleted == ["lost-in-move.md", "mine-gone.md"]
    else:
        assert changes.moved_from == ()
        assert changes.deleted == ["mine-gone.md"]
    again = classify(files, known, ROOT, FP, scope(), full_refresh=True)
    assert again.rerooted == () and len(again.todo) == 2  # each commit records this root


@pytest.mark.parametrize(
    ("source", "include", "exclude", "include_hidden", "expected"),
    [
        ("a.md", ["**/*.md"], [], False, True),
        ("deep/er/a.md", ["**/*.md"], [], False, True),
        ("a.txt", ["**/*.md"], [], False, False),
        ("deep/a.md", ["*.md"], [], False, False),
        ("drafts/a.md", ["**/*.md"], ["drafts/**"], False, False),
        (".dot.md", ["**/*.md"], [], False, False),
        (".hidden/secret.md", ["**/*.md"], [], False, False),
        ("guides/.cache/x.md", ["**/*.md"], [], False, False),
        (".dot.md", ["**/*.md"], [], True, True),
        (".hidden/secret.md", ["**/*.md"], [], True, True),
        (".hidden/secret.md", ["**/*.md"], [".hidden/**"], True, False),
    ],
)
def test_in_scope(
    source: str, include: list[str], exclude: list[str], include_hidden: bool, expected: bool
) -> None:
    assert in_scope(source, include, exclude, include_hidden) is expected


def _plan(root: Path, known: dict[str, FileState], include_hidden: bool = False) -> Changes:
    files = discover(root, INCLUDE, [], include_hidden)
    return classify(
        files,
        known,
        str(root.resolve()),
        FP,
        lambda s: in_scope(s, INCLUDE, [], include_hidden),
    )


def test_classify_against_a_real_tree(tiny_corpus: Path) -> None:
    root = str(tiny_corpus.resolve())
    first = _plan(tiny_corpus, {})
    assert first.new == 3 and first.deleted == []
    known = {
        f.source: FileState(f.source, root, f.sha256, FP, "done", None, (), (), "r")
        for f in first.todo
    }
    known[".hidden/secret.md"] = FileState(
        ".hidden/secret.md", root, "x", FP, "done", None, (), (), "r"
    )
    (tiny_corpus / "intro.md").write_text("# Changed\n", encoding="utf-8")
    (tiny_corpus / "guides" / "keeper.txt").unlink()
    (tiny_corpus / "added.txt").write_text("new\n", encoding="utf-8")
    second = _plan(tiny_corpus, known)
    assert [f.source for f in second.todo] == ["added.txt", "intro.md"]
    assert (second.new, second.changed, second.unchanged) == (1, 1, 1)
    assert second.deleted == ["guides/keeper.txt"]  # the hidden row is out of scope


FAILED_BEFORE = state("a.md", status="failed", attempt="sha-0")  # its bytes failed to load
UNREAD_BEFORE = state("a.md", status="failed")  # it could not be read last time either


@pytest.mark.parametrize(
    "known,kind",
    [
        (None, "new"),
        (state("a.md"), "changed"),
        (state("a.md", sha=""), "changed"),
        (FAILED_BEFORE, "changed"),
        (UNREAD_BEFORE, "retried"),
    ],
    ids=str,
)
def test_unreadable_file_is_always_to_do_and_never_deleted(
    known: FileState | None, kind: str
) -> None:
    f = FileRef(f"{ROOT}/a.md", "a.md", 0, 0.0, "", error="unreadable: permission denied")
    changes = classify([f], {"a.md": known} if known else {}, ROOT, FP, scope())
    assert changes.todo == [f]
    assert changes.why == {"a.md": kind}
    counts = {"new": changes.new, "changed": changes.changed, "retried": changes.retried}
    assert counts == {k: int(k == kind) for k in counts}
    assert changes.unchanged == 0
    assert changes.deleted == []


def test_a_file_over_the_size_limit_is_refused_without_being_read(tmp_path: Path) -> None:
    """Loading refuses it anyway: hashing a dump of gigabytes each run would be the plan."""
    (tmp_path / "big.txt").write_text("x" * 100)
    (tmp_path / "small.txt").write_text("y" * 50)
    big, small = discover(tmp_path, ["*.txt"], max_size=50)
    assert (big.sha256, big.size, big.error) == ("", 100, "file too large: 100 bytes > limit 50")
    assert small.error is None
    assert small.sha256 == hashlib.sha256(b"y" * 50).hexdigest()
    assert discover(tmp_path, ["*.txt"])[0].sha256 == hashlib.sha256(b"x" * 100).hexdigest()
