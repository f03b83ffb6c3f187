"""The README's examples run and print what it says they print."""

import contextlib
import io
import linecache
import re
from pathlib import Path

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_readme_kernel_example_runs():
    block = re.search(r"## Writing kernels\n\n```python\n(.*?)```", README, re.S).group(1)
    name = "<README.md: Writing kernels>"
    linecache.cache[name] = (len(block), None, block.splitlines(True), name)   # the compiler reads kernel source
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, name, "exec"), {})        # noqa: S102 - the README's own example
    lines = out.getvalue().splitlines()
    assert lines[0] == "[0. 3. 6. 9.]"
    assert re.match(r"\s*/\*0000\*/  \S+", lines[1])
    assert "ptxas info    : Used" in out.getvalue()


def test_readme_lists_every_layer_package():
    for package in ("lapis.libs", "lapis.cuda", "lapis.hip", "lapis.runtime", "lapis.driver", "lapis.hardware"):
        assert f"`{package}`" in README
    assert README.index("make demo") < README.index("## The layer map")
