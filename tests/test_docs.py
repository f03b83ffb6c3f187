"""The figures the docs quote about the demo's call agree with a traced run of it (docs/facts.py)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow                 # a subprocess each: `make test-fast` leaves them out

DOCS = Path(__file__).resolve().parent.parent / "docs"
_spec = importlib.util.spec_from_file_location("facts", DOCS / "facts.py")
facts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(facts)


@pytest.fixture(scope="module")
def demo():
    # the demo's run in a process of its own (a fresh memory pool, as the demo has)
    out = subprocess.run([sys.executable, str(DOCS / "facts.py"), "--json"], capture_output=True, text=True,
                         check=True, timeout=300)
    return json.loads(out.stdout)


def test_every_marked_figure_agrees_with_the_demo_run(demo):
    assert facts.disagreements(demo) == []


def test_the_walkthroughs_mark_their_figures(demo):
    marked = {page.name: {name for name, _, _ in facts.marks(page.read_text())} for page in DOCS.glob("*.md")}
    # each layer page's walkthrough quotes the run's own figures, marked so they are checked
    for page, names in {"layer0-hardware.md": {"registers", "shared_bytes", "time_us", "limiter"},
                        "layer2-runtime.md": {"kernarg_bytes", "header", "work_items"},
                        "layer3-programming-interface.md": {"kernarg_bytes"},
                        "layer4-libraries.md": {"registers", "shared_bytes", "bank_conflicts"}}.items():
        assert names <= marked[page], f"{page} quotes unmarked figures: {names - marked[page]}"
    assert set().union(*marked.values()) <= set(demo)


def test_the_check_finds_a_stale_figure(demo):
    stale = "uses 1<!--fact:registers--> registers"
    assert [name for name, shown, _ in facts.marks(stale)] == ["registers"]
    assert facts.rewrite(stale, demo) == f"uses {demo['registers']}<!--fact:registers--> registers"
    with pytest.raises(KeyError, match="no fact named 'nonsense'"):
        facts.rewrite("7<!--fact:nonsense-->", demo)
