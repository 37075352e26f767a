"""Summarise a py-spy profile of usher (``python -m bench.runner --profile``): where the time goes.

    python -m bench.profile bench/results/profiles/SchedulingBasic_500Nodes.usher-pqh-on.txt [--top 25]

py-spy's raw format is one collapsed stack per line with a sample count.
This prints, per function (``file:function``), its self share (samples where
it is the innermost frame) and its inclusive share (samples where it is on
the stack at all), of all non-idle samples, so the top costs can be named
with evidence.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

#: Innermost frames of a thread that waits rather than works (py-spy sees the Python frame that
#: blocks in C, e.g. an idle thread-pool worker in ``queue.get``): not usher's cost.
IDLE_LEAVES = frozenset(
    {
        "futures/thread.py:_worker",
        "threading.py:Condition.wait",
        "threading.py:Event.wait",
        "selectors.py:EpollSelector.select",
    }
)
_FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def frame_key(frame: str) -> str:
    """``function (path/to/file.py:123)`` -> ``to/file.py:function`` (line numbers dropped)."""
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match.group("file")
    parts = path.split("/")
    short = "/".join(parts[-2:]) if len(parts) > 1 else path
    return f"{short}:{match.group('function')}"


def summarise(path: Path) -> tuple[int, Counter[str], Counter[str]]:
    """(busy samples, self samples per function, inclusive samples per function); idle stacks skipped."""
    total = 0
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [frame_key(f) for f in stack.split(";") if f]
        if not frames or frames[-1] in IDLE_LEAVES:
            continue
        total += count
        own[frames[-1]] += count
        for key in set(frames):
            inclusive[key] += count
    return total, own, inclusive


def render(path: Path, top: int = 20) -> str:
    """A markdown report of the top self and inclusive costs."""
    total, own, inclusive = summarise(path)
    if not total:
        return f"{path}: no samples"
    lines = [f"{path.name}: {total} busy samples (200 Hz, all threads)", "", "Top self time:", ""]
    lines += [f"- {share / total:6.1%}  {key}" for key, share in own.most_common(top)]
    lines += ["", "Top inclusive time (usher and its libraries, entry points skipped):", ""]
    skip = ("runpy", "asyncio/", "__main__.py:main", "events.py:_run", "base_events.py")
    shown = 0
    for key, share in inclusive.most_common():
        if any(s in key for s in skip) or key.startswith("<module>"):
            continue
        lines.append(f"- {share / total:6.1%}  {key}")
        shown += 1
        if shown >= top:
            break
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("profiles", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args(argv)
    for path in args.profiles:
        print(render(path, args.top))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
