"""Adding a step is a page file, a core module, its catalogue entries and one entry in ``site.PAGES``.

The test makes that change in a copy of the project, a seventh step after step 6, and shows that everything
else follows from the list: the step count, "step n of N" and the navigation, the overview's ideas and the
count its title says, the tests' page lists and fuzzed links, the load generator's learners, and the catalogue
checks (every key used and present, every number sourced).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lensa.ui import i18n, site

ROOT = Path(__file__).resolve().parent.parent
COPIED = ("app.py", "pyproject.toml", ".streamlit/", "pages/", "lensa/", "bench/", "tests/")

PAGE = '''"""Step 7 · A step added by tests/test_add_a_step.py."""

from lensa.models import doubling
from lensa.ui import display, layout, widgets
from lensa.ui.frame import setup


def lesson() -> None:
    x = widgets.slider(page, "x", page.t("x"), page.num)
    layout.after_controls(page)
    display.metric_row([(page.t("metric_double"), page.num(doubling.double(x)))])


page = setup("doubling")
layout.step_header(page)
layout.lesson(page, lesson)
'''
CORE = '''"""What step 7 computes."""


def double(x: float) -> float:
    return 2 * x
'''
ENTRY = '    PageInfo("doubling", "pages/doubling.py", 7, (NumberControl("x", (1, 2, 3), 2, integer=True),)),\n'
TEXT = {
    "en": {
        "nav": 'doubling = "Doubling"',
        "overview": 'idea_doubling = "**Doubling.** Twice a number is that number added to itself."',
        "doubling": ['title = "Doubling"', 'headline = "Twice as much."', 'x = "A number"', 'metric_double = "Twice"'],
    },
    "id": {
        "nav": 'doubling = "Menggandakan"',
        "overview": 'idea_doubling = "**Menggandakan.** Dua kali bilangan adalah bilangan itu ditambah dirinya."',
        "doubling": [
            'title = "Menggandakan"',
            'headline = "Dua kali lipat."',
            'x = "Bilangan"',
            'metric_double = "Dua kali"',
        ],
    },
}

CHECKS = """
import sys
sys.path.insert(0, ".")
from pathlib import Path
from lensa.ui import i18n, site
from bench.loadgen import ALL_PAGES, LESSON_PAGES
from tests import test_fuzz_links, test_i18n, test_limits
from tests.pagetools import open_page, page_keys, sidebar_links
from tests.test_prose_numbers import unsourced

assert Path(site.__file__).resolve().is_relative_to(Path.cwd()), site.__file__  # the copy, not the project
assert site.STEP_COUNT == 7 and site.STEPS[-1].key == "doubling"
assert LESSON_PAGES[-1] == "doubling" and "doubling" in ALL_PAGES
assert page_keys(steps=True)[-1] == "doubling" and "doubling" in page_keys()
assert callable(test_fuzz_links.test_doubling_links)
assert ("doubling", "") in test_limits.PAGES
assert test_i18n._problems() == {}, test_i18n._problems()
assert all(unsourced(i18n.catalogue(lang), lang) == [] for lang in i18n.LANGUAGES)

for lang in i18n.LANGUAGES:
    at = open_page("doubling", lang=lang, x="3")
    assert not at.exception, [e.value for e in at.exception]
    assert at.caption[0].value == i18n.text(lang, "nav.step_of", n=7, total=7)
    assert [m.value for m in at.metric] == ["6"]
    assert f"7 · {i18n.text(lang, 'nav.doubling')}" in [label.strip("*") for label in sidebar_links(at)]
    first = open_page("memory", lang=lang)
    assert first.caption[0].value == i18n.text(lang, "nav.step_of", n=1, total=7)
    home = open_page("overview", lang=lang)
    assert not home.exception, [e.value for e in home.exception]
    seven = {"en": "seven", "id": "tujuh"}[lang]
    title = i18n.text(lang, "overview.ideas_title", Steps=seven.capitalize(), steps=seven)
    assert title.lower().count(seven) == 2 and title in [h.value for h in home.subheader]
    assert i18n.text(lang, "overview.idea_doubling") in [m.value for m in home.markdown]
print("seven steps")
"""


def _insert_after(text: str, line: str, added: str) -> str:
    assert text.count(line) == 1, line
    return text.replace(line, line + added)


def _add_a_step(root: Path) -> None:
    """What a newcomer writes: four files touched, nothing else."""
    (root / "pages" / "doubling.py").write_text(PAGE)
    (root / "lensa" / "models" / "doubling.py").write_text(CORE)
    site_py = root / "lensa" / "ui" / "site.py"
    source = site_py.read_text()
    speed_end = source.index('    PageInfo("formats"')
    site_py.write_text(source[:speed_end] + ENTRY + source[speed_end:])
    for lang, parts in TEXT.items():
        catalogue = root / "lensa" / "text" / f"{lang}.toml"
        text = _insert_after(catalogue.read_text(), "\n[nav]\n", parts["nav"] + "\n")
        idea = re.search(r"^idea_speed = .*\n", text, re.M)
        assert idea is not None
        text = text[: idea.end()] + parts["overview"] + "\n" + text[idea.end() :]
        text += "\n[doubling]\n" + "\n".join(parts["doubling"]) + "\n"
        catalogue.write_text(text)


def _copy_of_the_project(target: Path) -> Path:
    tracked = subprocess.run(
        ["git", "ls-files", *COPIED], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    untracked = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard", *COPIED], cwd=ROOT, capture_output=True, text=True
    ).stdout.splitlines()
    for name in {*tracked, *untracked}:
        if (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / name, target / name)
    return target


def test_a_seventh_step_needs_four_files_and_the_rest_follows(tmp_path):
    root = _copy_of_the_project(tmp_path)
    _add_a_step(root)
    changed = subprocess.run(
        ["git", "diff", "--no-index", "--stat", str(ROOT / "lensa" / "ui" / "site.py"), str(root / "lensa/ui/site.py")],
        capture_output=True,
        text=True,
    ).stdout
    assert "1 insertion" in changed and "deletion" not in changed  # one entry in the list, nothing else there
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHECKS)], cwd=root, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert out.stdout.strip().endswith("seven steps")


def test_without_its_catalogue_entries_the_key_check_names_them(tmp_path):
    root = _copy_of_the_project(tmp_path)
    _add_a_step(root)
    for lang in TEXT:
        catalogue = root / "lensa" / "text" / f"{lang}.toml"
        catalogue.write_text(catalogue.read_text().replace(TEXT[lang]["overview"] + "\n", ""))
    script = "from tests import test_i18n\nprint(sorted(test_i18n._problems()['missing in en']))"
    out = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "overview.idea_doubling (built from data)" in out.stdout


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda pages: (*pages[:2], pages[3], pages[2], *pages[4:]), "numbered 1 to 6 in order"),
        (lambda pages: (*pages, pages[1]), "a key or a file twice"),
    ],
)
def test_the_list_of_pages_checks_its_steps(change, message):
    with pytest.raises(ValueError, match=message):
        site._check(change(site.PAGES))
    site._check(site.PAGES)  # the project's own list passes


# A count of steps or ideas written as a word ("six steps", "enam langkah") would not follow the list ("one step"
# of training, "satu langkah", is not a count of the lesson's steps).
_COUNT_IN_WORDS = {
    "en": r"\b(?:two|three|four|five|six|seven|eight|nine|ten) (?:ideas|steps|lesson pages)\b",
    "id": r"\b(?:dua|tiga|empat|lima|enam|tujuh|delapan|sembilan|sepuluh) (?:gagasan|langkah)\b",
}


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_the_text_takes_the_count_of_steps_from_the_list(lang):
    catalogue = i18n.catalogue(lang)
    assert "{steps}" in catalogue["overview.ideas_title"]
    written = {k: m.group(0) for k, v in catalogue.items() if (m := re.search(_COUNT_IN_WORDS[lang], v, re.I))}
    assert written == {}
    assert re.search(_COUNT_IN_WORDS[lang], {"en": "Six ideas in six steps", "id": "Enam langkah"}[lang], re.I)
