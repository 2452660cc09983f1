"""Every ``type: ignore`` left in lensa/ names its error codes and says why, on its own line.

mypy (``make lint``, pyproject.toml) already rejects an ignore without a code and one that no longer hides an
error; the reason is ours: ``# type: ignore[code]  # why the checker is wrong or cannot know``.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

LENSA = Path(__file__).resolve().parent.parent / "lensa"
IGNORE = re.compile(r"type:\s*ignore")
WITH_REASON = re.compile(r"#\s*type:\s*ignore\[[a-z0-9-]+(,\s*[a-z0-9-]+)*\]\s+#\s*\S.*\S")


def ignores(source: str) -> list[tuple[int, str]]:
    """(line, comment) of each comment in ``source`` that mentions ``type: ignore``; strings are not comments."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [(t.start[0], t.string) for t in tokens if t.type == tokenize.COMMENT and IGNORE.search(t.string)]


def unexplained(source: str) -> list[tuple[int, str]]:
    return [(line, comment) for line, comment in ignores(source) if not WITH_REASON.fullmatch(comment)]


def test_every_type_ignore_in_lensa_has_a_code_and_a_reason() -> None:
    bad = [
        f"{path.relative_to(LENSA.parent)}:{line}: {comment}"
        for path in sorted(LENSA.rglob("*.py"))
        for line, comment in unexplained(path.read_text(encoding="utf-8"))
    ]
    assert not bad, "type: ignore without `[code]  # reason`:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("line", "ok"),
    [
        ("x = f()  # type: ignore[arg-type]  # the stubs lack the overload\n", True),
        ("x = f()  # type: ignore[arg-type, misc]  # plotly has no types\n", True),
        ("x = f()  # type: ignore[arg-type]\n", False),
        ("x = f()  # type: ignore\n", False),
        ("x = f()  # type: ignore  # no code\n", False),
        ("x = f()  # type: ignore[arg-type]  #\n", False),
        ("x = f()  # noqa: E501  # type: ignore[misc]\n", False),
        ('x = "# type: ignore"\n', True),
    ],
)
def test_the_check_tells_a_reasoned_ignore_from_a_bare_one(line: str, ok: bool) -> None:
    assert (not unexplained(line)) is ok
