"""noa tiltcheck: a tilt-series stack and the files beside it (.rawtlt, .tlt, mdoc, RELION 5 STAR) checked for
disagreements, section by section; the CLI exits 1 when there are any, as diff does."""

from __future__ import annotations

from typing_extensions import TypedDict

from noa_core.operations.spec import Reports, implemented


class TiltFinding(TypedDict):
    file: str
    section: int | None  # the stack's section (from 0); None: the file as a whole
    problem: str


class TiltCheckResult(TypedDict):
    path: str
    stack: str
    sections: int
    files: dict[str, str]  # by kind (rawtlt, tlt, mdoc, star): the file found beside the stack
    missing: list[str]
    consistent: bool
    findings: list[TiltFinding]


def as_text(result: dict) -> str:
    found = ", ".join(result["files"].values()) or "none"
    lines = [f"{result['stack']}: {result['sections']} sections; beside it: {found}"]
    lines += [f"{name}: not there (not checked)" for name in result["missing"]]
    lines += [f"{finding['file']}: {finding['problem']}" for finding in result["findings"]]
    count = len(result["findings"])
    lines.append("consistent" if not count else f"{count} disagreement{'s' if count > 1 else ''}")
    return "\n".join(lines)


def differs(result: dict) -> bool:
    return not result["consistent"]


OPERATION = Reports(
    name="tiltcheck",
    summary="Check a tilt-series stack against the files beside it (.rawtlt, .tlt, mdoc, RELION 5 STAR): each "
            "disagreement one line naming the file and the section; exit 1 when there are any.",
    details="FILES are tilt-series stacks (TS.st). Beside each, by its stem: TS.rawtlt, TS.tlt, TS.st.mdoc or "
            "TS.mdoc, TS.star (as noa tiltseries writes them); one not there is said and left out. Checked: the "
            "count of each against the stack's sections; the .rawtlt's and the STAR's angles against the mdoc's "
            "(else the .rawtlt's), the .tlt's order against theirs (alignment may shift its values); the "
            "pre-exposure (the mdoc's, the STAR's) never decreasing in acquisition order (DateTime, else ZValue); "
            "the mdoc's pixel size and image size against the stack's header and against each other; its tilt "
            "axis against the stack's 'Tilt axis angle' label and the STAR's rlnTomoNominalTiltAxisAngle; and the "
            "tilt axis of an mdoc not written by SerialEM (Thermo Fisher's Tomography 5 gives it in a convention "
            "of its own). Exit status: 0 consistent, 1 disagreements found, 2 a file unreadable.",
    examples=("noa tiltcheck TS_01.st", "noa tiltcheck TS_01.st --json"),
    reads_data=False,
    report=implemented("tiltcheck", "report"),
    text=as_text,
    result=TiltCheckResult,
    differs=differs,
)
