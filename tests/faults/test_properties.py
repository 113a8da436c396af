"""Property-based tests (hypothesis) of four input guards: the pull manifest validator, the job
name allowlist, the rendering of remote command lines, and the number tokenizer of the
typed-number check.

Each ``@example`` is the minimal case of a bug these properties once found.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from rgt_jupyter.args import RUN_ARGS, magic_parser, parse_line
from rgt_jupyter.backends.base import Backend
from rgt_jupyter.backends.detached import DetachedBackend, TmuxBackend
from rgt_jupyter.backends.k8s.launcher import K8sBackend
from rgt_jupyter.backends.slurm.launcher import SlurmBackend
from rgt_jupyter.deliver.numtokens import METRIC_WORDS, CodeScanner, TextScanner, Token
from rgt_jupyter.errors import PullError, UsageError
from rgt_jupyter.run.launch import default_name
from rgt_jupyter.run.pull import check_space, safe_relpath, validate_listing
from rgt_jupyter.store.names import JOB_NAME_RULE, check_job_name
from rgt_jupyter.transport.ssh.stream import read_command

# The CI box is small and shared: no per-example deadline, examples sized to keep the file fast.
FAST = settings(max_examples=100, deadline=None)
FEW = settings(max_examples=30, deadline=None)
# A recorded bug: the explicit example fails first; no shrinking (each try may be slow).
BUG = settings(max_examples=10, deadline=None, phases=[Phase.explicit, Phase.generate])

# -- shared strategies ----------------------------------------------------------------------

# Any Unicode character but NUL (no lone surrogates: strict UTF-8 cannot encode them).
ANY_CHAR = st.characters(codec="utf-8", exclude_characters="\x00")
ANY_TEXT = st.text(ANY_CHAR, max_size=40)
# One path component: any characters but '/' and NUL, neither '.' nor '..', at most 255 bytes.
COMPONENT = st.text(
    st.characters(codec="utf-8", exclude_characters="/\x00"), min_size=1, max_size=16
).filter(lambda c: c not in (".", ".."))
TOP = st.sampled_from(["outputs", "checkpoints"])
SHA = st.text("0123456789abcdef", min_size=64, max_size=64)
GOOD_ENTRY = {"size": 3, "sha256": "a" * 64}


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
        ),
        max_leaves=8,
    )


JSON = _json_values()


def _good_path() -> st.SearchStrategy[str]:
    return st.builds(
        lambda top, parts: "/".join([top, *parts]), TOP, st.lists(COMPONENT, min_size=1, max_size=4)
    )


def _entries() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"size": st.integers(min_value=0, max_value=2**40), "sha256": SHA},
        optional={
            "reused": st.booleans(),
            "stat": st.lists(st.integers(min_value=0, max_value=2**63), min_size=4, max_size=4),
        },
    )


@st.composite
def good_listings(draw: st.DrawFn) -> dict[str, dict[str, Any]]:
    """Well-formed listings: distinct (also ignoring case) paths, none inside another one."""
    paths = draw(st.lists(_good_path(), max_size=8, unique_by=lambda p: p.casefold()))
    folded = [p.casefold() for p in paths]
    kept = [p for p in paths if not any(q.startswith(p.casefold() + "/") for q in folded)]
    return {p: draw(_entries()) for p in kept}


@st.composite
def escaping_paths(draw: st.DrawFn) -> str:
    """A path with a '..', '.' or empty component, a leading '/', a trailing '/' or a NUL."""
    parts = [draw(TOP), *draw(st.lists(COMPONENT, min_size=1, max_size=4))]
    kind = draw(st.sampled_from(["..", ".", "", "absolute", "trailing", "nul"]))
    if kind in ("..", ".", ""):
        parts.insert(draw(st.integers(0, len(parts))), kind)
        return "/".join(parts)
    if kind == "absolute":
        return "/" * draw(st.integers(1, 2)) + "/".join(parts)
    if kind == "trailing":
        return "/".join(parts) + "/"
    i = draw(st.integers(0, len(parts) - 1))
    j = draw(st.integers(0, len(parts[i])))
    parts[i] = parts[i][:j] + "\x00" + parts[i][j:]
    return "/".join(parts)


def _stays_inside(rel: str) -> bool:
    return os.path.normpath(os.path.join("/run", rel)).startswith("/run/")


# -- 1. the pull manifest validator ---------------------------------------------------------


@FAST
@given(good_listings())
def test_well_formed_listings_are_accepted(files: dict[str, dict[str, Any]]) -> None:
    validate_listing(files, [])
    for rel in files:
        path = safe_relpath(rel)
        assert not path.is_absolute() and ".." not in path.parts and _stays_inside(rel)


@pytest.mark.fault(
    "B-properties",
    asserts="any path with .., /, an empty part or NUL is refused whole with a PullError naming it",
    na="generated inputs checked in memory: no files are involved",
    mutation=(
        "rgt_jupyter/run/pull/transfer.py",
        'if rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\x00" in rel:',
        "if False:",
    ),
)
@FAST
@example(bad="outputs/../../x")
@example(bad="/etc/passwd")
@example(bad="outputs//results.json")
@example(bad="outputs/a\x00b")
@given(bad=escaping_paths())
def test_escaping_paths_are_refused(bad: str) -> None:
    """Protection: rgt_jupyter/run/pull/transfer.py ``safe_relpath``: the test for ``/``, ``..``, empty
    parts and NUL; removed, escaping paths pass and the case fails.
    """
    with pytest.raises(PullError, match="rejected") as info:
        validate_listing({"outputs/ok.txt": GOOD_ENTRY, bad: GOOD_ENTRY}, [])
    assert repr(bad) in str(info.value)


@FAST
@example(rel="outputs/..\\..\\etc\\passwd")
@example(rel="..\\x")
@example(rel="outputs\\..\\..")
@given(
    rel=st.one_of(
        st.text("./\\x", max_size=14),
        st.builds(lambda t, r: f"{t}/{r}", TOP, st.text("./\\x", max_size=12)),
        ANY_TEXT,
    )
)
def test_an_accepted_path_never_leaves_the_run_folder(rel: str) -> None:
    """Backslashes are ordinary characters of a POSIX name: '..\\x' is one component, not a
    step up; whatever is accepted resolves inside the run folder."""
    try:
        validate_listing({rel: GOOD_ENTRY}, [])
    except PullError:
        return
    parts = rel.split("/")
    assert all(p not in ("", ".", "..") for p in parts) and "\x00" not in rel
    assert _stays_inside(rel)


@FAST
@given(
    rel=_good_path(),
    size=st.one_of(
        st.integers(max_value=-1),
        st.floats(),
        st.booleans(),
        st.none(),
        st.text(max_size=5),
        st.lists(st.integers(), max_size=2),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    ),
)
def test_sizes_that_are_not_byte_counts_are_refused(rel: str, size: Any) -> None:
    with pytest.raises(PullError, match="is not a byte count"):
        validate_listing({rel: {"size": size, "sha256": "a" * 64}}, [])


@FAST
@given(
    rel=_good_path(),
    sha=st.one_of(
        st.text(max_size=80).filter(lambda s: len(s) != 64), st.integers(), st.none(), JSON
    ),
)
def test_entries_without_a_sha256_are_refused(rel: str, sha: Any) -> None:
    entry = {"size": 3} if sha is None else {"size": 3, "sha256": sha}
    if isinstance(sha, str) and len(sha) == 64:
        return
    with pytest.raises(PullError, match="no sha256"):
        validate_listing({rel: entry}, [])


@FEW
@given(size=st.integers(min_value=10 * 2**40, max_value=2**70))
def test_huge_size_claims_are_refused_before_any_write(size: int) -> None:
    """The validator does not bound sizes; the space check before the first write does."""
    try:
        validate_listing({"outputs/huge.bin": {"size": size, "sha256": "b" * 64}}, [])
    except PullError:
        return
    root = Path(tempfile.gettempdir())
    if size + (1 << 20) > shutil.disk_usage(root).free:
        with pytest.raises(PullError, match="not enough space"):
            check_space(root / "rgt-no-such-runs", size, 1)


@FAST
@given(rel=_good_path(), child=st.lists(COMPONENT, min_size=1, max_size=3))
def test_a_file_listed_under_another_file_is_refused(rel: str, child: list[str]) -> None:
    inner = "/".join([rel, *child])
    with pytest.raises(PullError, match="lies under another listed file"):
        validate_listing({rel: GOOD_ENTRY, inner: GOOD_ENTRY}, [])


@FAST
@given(top=TOP, stem=COMPONENT)
def test_a_component_longer_than_255_bytes_is_refused(top: str, stem: str) -> None:
    name = stem * (255 // len(stem.encode()) + 1)
    assert len(name.encode()) > 255
    with pytest.raises(PullError, match="longer than this filesystem can hold"):
        validate_listing({f"{top}/{name}": GOOD_ENTRY}, [])


@FAST
@given(files=good_listings(), refused=st.lists(_good_path(), min_size=1, max_size=3))
def test_refused_entries_reject_the_whole_listing(
    files: dict[str, dict[str, Any]], refused: list[str]
) -> None:
    with pytest.raises(PullError, match="a symlink or special file"):
        validate_listing(files, refused)


@FAST
@given(
    files=st.dictionaries(
        st.one_of(ANY_TEXT, _good_path()),
        st.dictionaries(st.sampled_from(["size", "sha256", "reused", "stat"]) | ANY_TEXT, JSON),
        max_size=5,
    ),
    refused=st.lists(ANY_TEXT, max_size=3),
)
def test_entries_of_any_json_shape_raise_nothing_but_pull_error(
    files: dict[str, dict[str, Any]], refused: list[str]
) -> None:
    try:
        validate_listing(files, refused)
    except PullError:
        pass


@BUG
@example(files={"outputs/a": 3}, refused=[])
@given(
    files=st.dictionaries(st.one_of(ANY_TEXT, _good_path()), JSON, max_size=5),
    refused=st.lists(ANY_TEXT, max_size=3),
)
def test_any_json_listing_raises_nothing_but_pull_error(
    files: dict[str, Any], refused: list[str]
) -> None:
    try:
        validate_listing(files, refused)
    except PullError:
        pass


@BUG
@example(rel="outputs/caf\udce9.txt")
@given(
    rel=st.builds(
        lambda path, ch: path + ch,
        _good_path(),
        st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF),
    )
)
def test_names_that_are_not_utf8_are_pulled_or_refused_with_pull_error(rel: str) -> None:
    try:
        validate_listing({rel: GOOD_ENTRY}, [])
    except PullError:
        pass


@BUG
@example(depth=17)
@given(depth=st.integers(min_value=17, max_value=40))
def test_paths_longer_than_path_max_are_refused(depth: int) -> None:
    rel = "outputs/" + "/".join(["n" * 255] * depth)
    assert len(rel.encode()) > 4096
    with pytest.raises(PullError):
        validate_listing({rel: GOOD_ENTRY}, [])


@BUG
@example(rel="outputs/Results.csv")
@given(rel=_good_path())
def test_case_colliding_names_are_refused(rel: str) -> None:
    top, _, rest = rel.partition("/")
    other = f"{top}/{rest.swapcase()}"
    if other == rel or other.casefold() != rel.casefold():
        return
    with pytest.raises(PullError):
        validate_listing({rel: GOOD_ENTRY, other: GOOD_ENTRY}, [])


# -- 2. the job-name allowlist ---------------------------------------------------------------

# The rule as the README ("Names and paths") states it.
README_RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)
RULE_NAMES = st.from_regex(README_RULE, fullmatch=True)
HOSTILE_PIECES = [
    " ",
    "'",
    '"',
    "/",
    ";",
    "$",
    "\n",
    "\x00",
    "`",
    "\t",
    "\r",
    "\\",
    "|",
    "&",
    "<",
    ">",
    "*",
    "?",
    "~",
    "$(touch pwned)",
    "é",
    "\u2028",
]


@st.composite
def hostile_names(draw: st.DrawFn) -> str:
    """A name the README allows with a space, quote, '/', ';', '$', newline, NUL or another
    character outside the rule put in, or a leading '-'."""
    name = draw(RULE_NAMES)
    if draw(st.booleans()):
        return "-" + name
    piece = draw(st.sampled_from(HOSTILE_PIECES))
    at = draw(st.integers(0, len(name)))
    return name[:at] + piece + name[at:]


@FAST
@given(name=RULE_NAMES.filter(lambda n: ".." not in n))
def test_names_the_rule_allows_are_accepted(name: str) -> None:
    assert check_job_name(name) == name


@pytest.mark.fault(
    "B-properties",
    asserts="any generated hostile job name is refused with the rule spelled out",
    na="generated inputs checked in memory: no files are involved",
    mutation=(
        "rgt_jupyter/store/names.py",
        'if not isinstance(name, str) or not JOB_NAME_RE.fullmatch(name) or ".." in name:',
        "if not isinstance(name, str):",
    ),
)
@FAST
@example(name="-rf")
@example(name="a\nb")
@example(name="ok\n")
@given(name=hostile_names())
def test_hostile_names_are_refused_with_the_rule(name: str) -> None:
    """Protection: rgt_jupyter/store/names.py ``check_job_name``: the allowlist; removed, hostile
    names are accepted and the case fails.
    """
    with pytest.raises(UsageError) as info:
        check_job_name(name)
    assert JOB_NAME_RULE in str(info.value)


@FAST
@given(name=st.one_of(st.text(), RULE_NAMES, hostile_names(), st.text("a.-_/ $\n", max_size=70)))
def test_accepted_names_match_the_rule_and_nothing_but_usage_error_is_raised(name: str) -> None:
    try:
        accepted = check_job_name(name)
    except UsageError as exc:
        assert JOB_NAME_RULE in str(exc)
        return
    assert accepted == name
    assert README_RULE.fullmatch(name) and ".." not in name


@example(name="a..b")
@given(name=RULE_NAMES)
def test_names_with_two_dots_are_refused_and_the_rule_says_why(name: str) -> None:
    """The README's rule and the refusal both name '..': a name is accepted exactly when it
    fits the character rule and has no '..'."""
    if ".." in name:
        with pytest.raises(UsageError, match="'..'"):
            check_job_name(name)
    else:
        assert check_job_name(name) == name


@FAST
@given(program=st.text())
def test_an_unnamed_cell_gets_an_allowed_name(program: str) -> None:
    name = default_name(program)
    assert check_job_name(name) == name


RUN_PARSER = magic_parser("%%remote_run", "run a cell as a job", RUN_ARGS)


@FAST
@example(name="$(touch pwned)")
@example(name="-rf")
@example(name='it\'s "q"\n')
@given(name=ANY_TEXT.filter(lambda n: n != "--"))
def test_a_name_reaches_the_allowlist_exactly_as_quoted_on_the_magic_line(name: str) -> None:
    """Every name but '--' (recorded below) arrives as typed."""
    args = parse_line(RUN_PARSER, f"--name={shlex.quote(name)}")
    assert args is not None and args.name == name
    try:
        assert check_job_name(args.name) == name
    except UsageError:
        pass


@BUG
@example(name="--")
@given(name=ANY_TEXT)
def test_any_name_on_the_magic_line_is_accepted_or_refused_with_a_usage_error(name: str) -> None:
    args = parse_line(RUN_PARSER, f"--name={shlex.quote(name)}")
    assert args is not None
    try:
        check_job_name(args.name)
    except UsageError:
        pass


@FAST
@example(line="--name 'unclosed")
@example(line="--name")
@example(line="--nmae=x")
@given(line=st.one_of(st.text(), st.text("-name= '\"\\x$;", max_size=30)))
def test_a_magic_line_is_parsed_or_refused_with_a_usage_error(line: str) -> None:
    try:
        parse_line(RUN_PARSER, line)
    except UsageError:
        pass


# -- 3. command lines rendered for a remote shell ---------------------------------------------

SHELLS = [s for s in ("/bin/sh", shutil.which("bash")) if s]
NASTY_ARGS = [
    "$(touch pwned)",
    "`touch pwned`",
    "it's",
    'say "hi"',
    "a;touch pwned",
    "a && touch pwned",
    "x\ny",
    "-rf",
    "--fresh",
    "",
    "~/x",
    "*",
    "a b\tc",
    "\\",
    "'\"'\"'",
    "${HOME}",
    "é ü €",
]


def _shell_words(shell: str, script: str, cwd: str) -> list[str]:
    """Run ``script`` in ``shell`` (in ``cwd``); it prints its words NUL-terminated."""
    proc = subprocess.run(
        [shell, "-c", script], cwd=cwd, capture_output=True, timeout=30, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return [w.decode() for w in proc.stdout.split(b"\0")[:-1]]


@FAST
@example(launcher=DetachedBackend(), python="/usr/bin/python3", control="/srv/rgt jobs/it's $(x)")
@given(
    launcher=st.sampled_from([DetachedBackend(), TmuxBackend(), SlurmBackend(), K8sBackend()]),
    python=st.one_of(ANY_TEXT, st.sampled_from(NASTY_ARGS)),
    control=st.one_of(ANY_TEXT, st.sampled_from(NASTY_ARGS)),
)
def test_a_launch_line_splits_back_into_exactly_its_argv(
    launcher: Backend, python: str, control: str
) -> None:
    argv = launcher.render(python, control)
    assert shlex.split(launcher.launch_line(python, control)) == argv
    assert python in argv and control in argv


@pytest.mark.fault(
    "B-properties",
    asserts="dash and bash given the launch line get back exactly the argv and run nothing else",
    na="generated inputs checked in memory: no files are involved",
    mutation=(
        "rgt_jupyter/backends/base.py",
        "return shlex.join(self.render(python, control_dir))",
        'return " ".join(self.render(python, control_dir))',
    ),
)
@FEW
@example(launcher=DetachedBackend(), python="$(touch pwned)", control="`touch pwned`;x")
@given(
    launcher=st.sampled_from([DetachedBackend(), TmuxBackend(), SlurmBackend()]),
    python=st.one_of(ANY_TEXT, st.sampled_from(NASTY_ARGS)),
    control=st.one_of(ANY_TEXT, st.sampled_from(NASTY_ARGS)),
)
def test_a_real_shell_gets_the_launch_argv_back_and_runs_nothing_else(
    launcher: Backend, python: str, control: str
) -> None:
    """The line's leading ``sh`` is replaced by a shell function that prints its arguments.

    Protection: rgt_jupyter/backends/base.py ``Backend.launch_line``: ``shlex.join`` quotes
    every word; joined unquoted, a real shell splits and expands them and the case fails.
    """
    argv = launcher.render(python, control)
    assert argv[0] == "sh"
    line = launcher.launch_line(python, control)
    for shell in SHELLS:
        with tempfile.TemporaryDirectory() as cwd:
            words = _shell_words(shell, "sh() { printf '%s\\0' \"$@\"; }\n" + line, cwd)
            assert words == argv[1:], shell
            assert os.listdir(cwd) == [], "the shell ran something"


@FEW
@example(argv=["python3", "/ctl/agent.py", "manifest", "outputs=/o $(touch pwned)"])
@given(argv=st.lists(st.one_of(ANY_TEXT, st.sampled_from(NASTY_ARGS)), min_size=1, max_size=6))
def test_any_argv_joined_for_ssh_reaches_a_real_shell_as_the_same_words(argv: list[str]) -> None:
    """What the SSH transport sends is ``shlex.join(argv)``; ``set --`` makes the shell split
    and expand it like any command line without running it."""
    script = "set -- " + shlex.join(argv) + "\nprintf '%s\\0' \"$@\""
    for shell in SHELLS:
        with tempfile.TemporaryDirectory() as cwd:
            assert _shell_words(shell, script, cwd) == argv, shell
            assert os.listdir(cwd) == []


FILE_NAME = COMPONENT.filter(lambda c: len(c.encode()) <= 255)


@FEW
@example(folder="dir ;with `odd`", name="$(touch pwned).txt", size=10, offset=3)
@example(folder="-x", name="new\nline 'q'", size=300_000, offset=131_073)
@given(
    folder=FILE_NAME,
    name=FILE_NAME,
    size=st.integers(min_value=0, max_value=300_000),
    offset=st.integers(min_value=0, max_value=300_010),
)
def test_the_remote_read_command_streams_any_path_from_any_offset(
    folder: str, name: str, size: int, offset: int
) -> None:
    content = (bytes(range(256)) * (size // 256 + 1))[:size]
    for shell in SHELLS:
        with tempfile.TemporaryDirectory() as root:
            path = Path(root, folder, name)
            path.parent.mkdir()
            path.write_bytes(content)
            proc = subprocess.run(
                [shell, "-c", read_command(str(path), offset)],
                cwd=root,
                capture_output=True,
                timeout=30,
                check=False,
            )
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout == content[offset:], shell
            assert os.listdir(root) == [folder]
            assert os.listdir(path.parent) == [name]


# -- 4. the number tokenizer of the typed-number check -----------------------------------------

SCANNER = TextScanner(frozenset(METRIC_WORDS))
ENTRIES: dict[str, Callable[[str], list[Token]]] = {
    "markdown": SCANNER.markdown,
    "output_text": SCANNER.output_text,
    "html": SCANNER.html,
}
NUMBERISH = (
    "0123456789.,-+eE%x^×·‰ kKMBG|`<>!-[](){}#*_/:\n\r±$\\~@§vV\x1b\u2212\u00a0\u2009=&;\"'pdfT"
)


# Without '<' and ESC: unclosed '<!--', '<table' and OSC escapes are scanned across lines (the
# quadratic cases recorded below).
ORDINARY = NUMBERISH.replace("<", "").replace("\x1b", "")


def _short_digit_runs(text: str) -> str:
    """``text`` (NFKC-normalised, as the scanner reads it) with every run of more than five
    digits split by a space, so that no exponent reaches the overflow recorded below."""
    return re.sub(r"(\d{5})(?=\d)", r"\1 ", unicodedata.normalize("NFKC", text))


def _numbers(tokens: list[Token]) -> list[Token]:
    return [t for t in tokens if t.kind == "number"]


FLOATS = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@pytest.mark.fault(
    "B-properties",
    asserts="a formatted float in a sentence is read with its value, decimals and sign "
    "(ASCII or U+2212 minus)",
    na="generated inputs checked in memory: no files are involved",
    mutation=(
        "rgt_jupyter/deliver/numtext.py",
        '.replace("\\u2212", "-")',
        "",
    ),
)
@FAST
@pytest.mark.parametrize("where", ["markdown", "output_text"])
@example(x=-0.5, decimals=3, minus="\u2212")
@example(x=31.42, decimals=2, minus="-")
@example(x=2023.0, decimals=0, minus="-")
@given(x=FLOATS, decimals=st.integers(0, 6), minus=st.sampled_from(["-", "\u2212"]))
def test_a_formatted_float_in_a_sentence_is_read_with_its_value_and_decimals(
    where: str, x: float, decimals: int, minus: str
) -> None:
    """Protection: rgt_jupyter/deliver/numtext.py: U+2212 is normalised to ``-``; removed,
    a number shown with a typographic minus is read without its sign and the case fails.
    """
    shown = f"{x:.{decimals}f}"
    sentence = f"The test accuracy was {shown.replace('-', minus)} on the held-out set."
    (tok,) = _numbers(ENTRIES[where](sentence))
    assert tok.text == shown
    assert tok.value == float(shown)
    assert tok.decimals == decimals
    assert tok.sign_shown == shown.startswith("-")


@FAST
@pytest.mark.parametrize("where", ["markdown", "output_text"])
@example(x=0.873, decimals=1, minus="-")
@example(x=-0.0123, decimals=2, minus="\u2212")
@given(
    x=st.floats(min_value=-1, max_value=1, allow_nan=False),
    decimals=st.integers(0, 4),
    minus=st.sampled_from(["-", "\u2212"]),
)
def test_a_percentage_is_read_with_its_shown_value_and_suffix(
    where: str, x: float, decimals: int, minus: str
) -> None:
    shown = f"{x * 100:.{decimals}f}"
    sentence = f"Top-1 accuracy reached {shown.replace('-', minus)}% on the test split."
    (tok,) = [t for t in _numbers(ENTRIES[where](sentence)) if t.suffix == "%"]
    assert tok.text == shown + "%"
    assert tok.value == float(shown) and tok.decimals == decimals
    assert abs(tok.value / 100 - x) <= 0.5 * 10**-decimals / 100 + 1e-12


@FAST
@pytest.mark.parametrize("where", ["markdown", "output_text"])
@given(
    shown=st.lists(
        st.builds(lambda x, d: f"{x:.{d}f}", FLOATS, st.integers(0, 6)), min_size=1, max_size=6
    )
)
def test_every_number_of_a_sentence_is_read_in_order(where: str, shown: list[str]) -> None:
    sentence = "The test loss went " + " and ".join(shown) + " over the runs."
    tokens = _numbers(ENTRIES[where](sentence))
    assert [t.value for t in tokens] == [float(s) for s in shown]
    assert [t.decimals for t in tokens] == [len(s.partition(".")[2]) for s in shown]


@settings(max_examples=300, deadline=None)
@example(text="loss 1E99999 and 2e-99999, 3 × 10^99999 and 10^-99999")
@example(text="<!-- rgt:ignore -->\n| a | b |\n|---|---|\n| 1 | 2 |")
@example(text="```\n1\n")
@given(text=st.one_of(st.text(), st.text(NUMBERISH, max_size=80)).map(_short_digit_runs))
def test_the_tokenizer_never_raises_on_text(text: str) -> None:
    for scan in ENTRIES.values():
        for tok in scan(text):
            assert tok.line >= 1 and tok.col >= 1
            if tok.value is not None:
                assert tok.decimals is not None and tok.decimals >= 0


class _TooSlow(Exception):
    """A scan spent more CPU time than its budget."""


@contextmanager
def _cpu_budget(seconds: float) -> Iterator[None]:
    """Raise :class:`_TooSlow` inside the block once it used ``seconds`` of CPU time (a
    virtual timer: the wall-clock alarm stays pytest-timeout's)."""

    def expired(signum: int, frame: FrameType | None) -> None:
        raise _TooSlow(f"more than {seconds} s of CPU time")

    old = signal.signal(signal.SIGVTALRM, expired)
    signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, old)


@settings(max_examples=10, deadline=None)
@given(
    lines=st.lists(
        st.one_of(
            st.text(max_size=120),
            st.text(ORDINARY, max_size=120),
            st.builds(
                lambda x, d: f"| test PSNR | {x:.{d}f} | {x / 3:.{d}f}% |",
                FLOATS,
                st.integers(0, 4),
            ),
        ).map(_short_digit_runs),
        min_size=1,
        max_size=12,
    )
)
def test_the_tokenizer_scans_long_texts_of_ordinary_lines_in_bounded_time(
    lines: list[str],
) -> None:
    """About 40,000 characters of lines up to 120 long: a fraction of a second of CPU here."""
    block = "\n".join(lines) + "\n"
    text = block * (40_000 // len(block) + 1)
    for scan in ENTRIES.values():
        with _cpu_budget(5.0):
            scan(text)


SLOW_LINES: dict[str, Callable[[int], str]] = {
    "digits": lambda n: "9" * n,
    "dashes": lambda n: "1-" * (n // 2),
    "signed exponents": lambda n: "1e+" * (n // 3),
    "open comments": lambda n: "1 <!--" * (n // 6),
    "indented pipe": lambda n: "| a |\n" + " " * n + "|x",
    "unclosed OSC escapes": lambda n: "\x1b]1\n" * (n // 4),
    "unclosed tables": lambda n: "<table>1\n" * (n // 9),
}


@BUG
@example(shape="digits", where="output_text")
@given(shape=st.sampled_from(sorted(SLOW_LINES)), where=st.sampled_from(sorted(ENTRIES)))
def test_the_tokenizer_scans_pathological_texts_in_bounded_time(shape: str, where: str) -> None:
    text = SLOW_LINES[shape](20_000)
    with _cpu_budget(1.0):
        ENTRIES[where](text)


@BUG
@example(mantissa="1", exponent=1_000_000, form="E", where="markdown")
@given(
    mantissa=st.sampled_from(["1", "2.5", "10", "0.3"]),
    exponent=st.integers(min_value=-(10**8), max_value=10**8),
    form=st.sampled_from(["E", "e", " × 10^"]),
    where=st.sampled_from(["markdown", "output_text"]),
)
def test_numbers_with_any_exponent_are_read_without_error(
    mantissa: str, exponent: int, form: str, where: str
) -> None:
    sign = "+" if exponent >= 0 and form == "e" else ""
    ENTRIES[where](f"The test loss was {mantissa}{form}{sign}{exponent} at the end.")


@BUG
@example(digits=4301)
@given(digits=st.integers(min_value=4301, max_value=6000))
def test_code_literals_with_any_exponent_are_read_without_error(digits: int) -> None:
    CodeScanner().scan("x = 1e" + "9" * digits + "\n")
