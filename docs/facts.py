"""The numbers the pages quote about the demo's call, taken from a traced run of it, so they cannot drift.

    python docs/facts.py            # rewrite every marked number in docs/*.md from a fresh run
    python docs/facts.py --check    # list where a page disagrees with the run (exit status 1)
    python docs/facts.py --json     # the run's figures

The run is the demo's, in a process of its own: a fresh memory pool, as the demo has.

A page marks a number with an HTML comment right after it, which renders as nothing:
`72<!--fact:registers-->` says the demo's gemm kernel uses 72 registers. tests/test_docs.py runs the
check, so a change that moves a figure fails until the pages are rewritten with this script.
"""

import argparse
import json
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
DEMO_SIZE = 128                       # the pages' walkthroughs follow lapis.matmul at 128x128 on cuda
MARK = re.compile(r"([^\s`(*]+?)<!--fact:([a-z_]+)-->")


def demo_facts() -> dict[str, str]:
    """Run the demo's call under a trace and read every quoted figure from its events."""
    import lapis
    from lapis.hardware import get_profile
    from lapis.libs.blas import DEFAULT_TILES

    n = DEMO_SIZE
    a, b = lapis.randn(n, n, device="cuda"), lapis.randn(n, n, device="cuda")
    a.cpu(), b.cpu()
    with lapis.trace() as t:
        c = lapis.matmul(a, b)
        c.cpu()
    launch = next(e.args for e in t.select(3, "launch") if e.args["kernel"] == "gemm_kernel")
    dispatch = next(e.args for e in t.select(2, "packet") if e.args["fields"]["header"]["type"] == "KERNEL_DISPATCH")
    packet, raw = dispatch["fields"], bytes.fromhex(dispatch["bytes_hex"])
    kernel = next(e.args for e in t.select(0, "kernel") if e.args["grid"] == launch["grid"])
    c_alloc = next(e.args for e in t.select(1, "ALLOC_MEMORY_OF_GPU") if e.args["size"] == n * n * 4)
    units = get_profile(kernel["profile"]).compute_units
    threads = launch["block"][0] * launch["block"][1] * launch["block"][2]
    tiles = DEFAULT_TILES
    return {
        "size": str(n),
        "registers": str(launch["registers"]),
        "shared_bytes": str(launch["shared_bytes"]),
        "kernarg_bytes": str(launch["kernarg_bytes"]),
        "threads": str(threads),
        "grid": "x".join(map(str, launch["grid"])),
        "work_items": f"{packet['grid_size_x']}x{packet['grid_size_y']}x{packet['grid_size_z']}",
        "workgroup": f"{packet['workgroup_size_x']}x{packet['workgroup_size_y']}x{packet['workgroup_size_z']}",
        "header": f"{int.from_bytes(raw[:2], 'little'):#06x}",
        "setup": str(packet["setup"]),
        "group_segment": str(packet["group_segment_size"]),
        "blocks": str(kernel["blocks"]),
        "waves": str(kernel["waves"]),
        "lanes": str(kernel["blocks"] * threads),
        "blocks_per_unit": str(kernel["blocks_per_unit"]),
        "bank_conflicts": str(kernel["bank_conflicts"]),
        "occupancy_limiter": kernel["occupancy_limiter"],
        "resident_blocks": str(kernel["blocks_per_unit"] * units),
        "time_us": f"{kernel['time_ns'] / 1e3:.1f}",
        "limiter": kernel["limiter"],
        "c_kib": str(c_alloc["size"] // 1024),
        "c_page_entries": str(c_alloc["size"] // 4096),
        "c_page_entry_bytes": str(c_alloc["size"] // 4096 * 8),
        "tile": f"{tiles.bm}x{tiles.bn}",
        "tile_depth": str(tiles.bk),
        "per_thread": f"{tiles.tm}x{tiles.tn}",
    }


def marks(text: str) -> list[tuple[str, str, re.Match]]:
    """(fact name, the value the page shows, the match) for every marked number in a page."""
    return [(m.group(2), m.group(1), m) for m in MARK.finditer(text)]


def rewrite(text: str, facts: dict[str, str]) -> str:
    def value(m: re.Match) -> str:
        if m.group(2) not in facts:
            raise KeyError(f"no fact named {m.group(2)!r}; the facts are {', '.join(sorted(facts))}")
        return f"{facts[m.group(2)]}<!--fact:{m.group(2)}-->"
    return MARK.sub(value, text)


def disagreements(facts: dict[str, str]) -> list[str]:
    """'page: fact shows X, the run gives Y' for every marked number that differs from the run."""
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for name, shown, _ in marks(page.read_text()):
            if facts.get(name) != shown:
                found.append(f"{page.name}: {name} shows {shown}, the run gives {facts.get(name, '(no such fact)')}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only list disagreements")
    parser.add_argument("--json", action="store_true", help="print the run's figures as JSON")
    args = parser.parse_args()
    facts = demo_facts()
    if args.json:
        print(json.dumps(facts))
        return 0
    if args.check:
        wrong = disagreements(facts)
        print("\n".join(wrong) or "every marked number agrees with the run")
        return 1 if wrong else 0
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        new = rewrite(text, facts)
        if new != text:
            page.write_text(new)
            print(f"rewrote {page.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
