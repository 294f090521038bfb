"""Start-up latency of the `noa` command, end to end as a user types them: `noa --help` and
`noa permute --help` (goal < 0.3 s), `noa info` on a small file with a warm kernel cache (goal < 0.4 s).

The commands run in turns (one of each per round, so a busy neighbour slows them alike), with a
bare `python -c pass` in every round: the floor no Python command can beat. Prints the median and
best wall time, the median minus the floor (noa's own start-up), and the verdict against the goal.
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


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    subprocess.run([NOA, "warmup", "-q"], check=True)  # warm kernel cache, as the goal states
    rows = [
        ("python -c pass (floor)", [sys.executable, "-c", "pass"], None),
        ("noa --help", [NOA, "--help"], 0.3),
        ("noa permute --help", [NOA, "permute", "--help"], 0.3),
        ("noa info emd_3197.map", [NOA, "info", str(SAMPLE)], 0.4),
        ("noa info --json emd_3197.map", [NOA, "info", "--json", str(SAMPLE)], 0.4),
    ]
    times: list[list[float]] = [[] for _ in rows]
    for _ in range(args.runs):
        for row_times, (_, command, _) in zip(times, rows):
            row_times.append(timed(command))
    floor = statistics.median(times[0])
    print(f"{'command':<32}{'median s':>10}{'best s':>10}{'- floor':>9}{'goal s':>8}  verdict")
    for (name, _, goal), row_times in zip(rows, times):
        median = statistics.median(row_times)
        verdict = "-" if goal is None else ("met" if median < goal else "MISSED")
        print(f"{name:<32}{median:>10.3f}{min(row_times):>10.3f}{median - floor:>9.3f}{goal or '-':>8}  {verdict}")


if __name__ == "__main__":
    main()
