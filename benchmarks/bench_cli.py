"""Start-up latency of the `noa` command: `noa --help` (goal < 0.3 s) and `noa info` on a small
file with a warm kernel cache (goal < 0.6 s), end to end as a user types them.

Prints one table: median and best wall time over several runs, the goal, and the time of a bare
`python -c pass` measured in the same run (the floor no Python command can beat).
Run: python benchmarks/bench_cli.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOA = str(Path(sys.executable).parent / "noa")
SAMPLE = ROOT / "examples" / "data" / "emd_3197.map"


def timed(command: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    subprocess.run([NOA, "warmup", "-q"], check=True)  # warm kernel cache, as the goal states
    rows = [
        ("python -c pass (floor)", [sys.executable, "-c", "pass"], None),
        ("noa --help", [NOA, "--help"], 0.3),
        ("noa info emd_3197.map", [NOA, "info", str(SAMPLE)], 0.6),
        ("noa info --json emd_3197.map", [NOA, "info", "--json", str(SAMPLE)], 0.6),
    ]
    print(f"{'command':<32}{'median s':>10}{'best s':>10}{'goal s':>8}{'median/goal':>13}  verdict")
    for name, command, goal in rows:
        times = timed(command, args.runs)
        median = statistics.median(times)
        ratio = f"{median / goal:.2f}" if goal else "-"
        verdict = "-" if goal is None else ("met" if median < goal else "MISSED")
        print(f"{name:<32}{median:>10.3f}{min(times):>10.3f}{goal or '-':>8}{ratio:>13}  {verdict}")


if __name__ == "__main__":
    main()
