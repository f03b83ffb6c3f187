"""The README's examples run and print what it says they print, and what it names exists."""

import contextlib
import io
import linecache
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _run_block(heading: str) -> tuple[str, dict]:
    """Run the README's python block under a heading; its printed output and its variables."""
    block = re.search(rf"## {heading}\n\n```python\n(.*?)```", README, re.S).group(1)
    name = f"<README.md: {heading}>"
    linecache.cache[name] = (len(block), None, block.splitlines(True), name)   # the compiler reads kernel source
    out, scope = io.StringIO(), {}
    with contextlib.redirect_stdout(out):
        exec(compile(block, name, "exec"), scope)        # noqa: S102 - the README's own example
    return out.getvalue(), scope


@pytest.mark.slow
def test_readme_seed_program_runs_and_prints_what_it_says():
    block = re.search(r"## The seed program\n\n```python\n(.*?)```", README, re.S).group(1)
    promised = re.search(r"# (lapis\.Size\(.*\))", block).group(1)
    out, scope = _run_block("The seed program")
    assert out == f"Calculation complete. Result shape: {promised}\n"
    a, b, c = (scope[k].cpu().numpy() for k in ("A", "B", "C"))
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=2e-3)


def test_readme_kernel_example_runs():
    out, _ = _run_block("Writing kernels")
    lines = out.splitlines()
    assert lines[0] == "[0. 3. 6. 9.]"
    assert re.fullmatch(r"\s*// <README.md: Writing kernels>:6", lines[1])    # the line table, as -lineinfo keeps
    assert re.match(r"\s*/\*0000\*/  \S+", lines[2])
    assert "ptxas info    : Used" in out


def test_readme_lists_every_layer_package():
    for package in ("lapis.framework", "lapis.libs", "lapis.cuda", "lapis.hip", "lapis.runtime", "lapis.driver",
                    "lapis.hardware"):
        assert f"`{package}`" in README


def test_what_the_readme_names_exists():
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    for target in re.findall(r"\bmake ([\w-]+)", README):
        assert target in targets, f"README says `make {target}`; the Makefile has no such target"
    for path in re.findall(r"\b((?:examples|benchmarks|docs|tests|src)/[\w/.-]+\.(?:py|md))", README):
        assert (ROOT / path).exists(), f"README names {path}, which does not exist"
    from lapis.cli import main
    for command in set(re.findall(r"`lapis ([a-z]+)", README)):
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                main([command, "--help"])
            except SystemExit as e:
                assert e.code == 0, f"README names `lapis {command}`, which the CLI does not have"
