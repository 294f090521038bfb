"""noa copy: copy an image file, optionally to another order, element type or format."""

from __future__ import annotations

from pathlib import Path

from noa_core.operations.spec import DEVICE, ELEMENT_TYPES, READING, Choice, Flag, Operation, Options, Param

# How an MRC output stores uint8 data (noa_core.io.mrc.UINT8_MODES; that module loads NumPy, a test keeps
# these equal). Shared by the operations that can write uint8 from any input (copy, ewise).
UINT8_MODE = Param("uint8_mode", Choice(("widen", "imod")),
                   "MRC outputs: store uint8 as uint16 (widen: every reader agrees) or as IMOD's unsigned mode 0 "
                   "(imod: only IMOD reads 0..255; MRC2014 readers see signed bytes).", default="widen")


def write_options(options: Options) -> dict[str, str]:
    """The output format's own choices among ``options``."""
    return {"uint8_mode": options.uint8_mode}


def plan(inputs: list[Path], options: Options):
    from noa_core import dtypes
    from noa_core.array import resolve_copy_order
    from noa_core.operations.plan import converter, make_plan

    array, meta = options.open_input(inputs[0])
    out_dtype = None if options.dtype is None else dtypes.scalar_dtype(options.dtype)
    out_order = resolve_copy_order(array, options.order)
    words = [f"--order {out_order}"] + ([f"--dtype {out_dtype}"] if out_dtype is not None else [])
    return make_plan(inputs, [array], [array], converter("clamp" if options.clamp else "checked"), meta,
                     "noa copy " + " ".join(words), out_dtype, out_order, write_options(options))


def warmup(dtype: str, shape: tuple[int, ...]) -> list[tuple[str, dict]]:
    """F order, and conversions between each type and float32 (both ways, checked and clamped)."""
    if dtype.startswith("complex"):
        return [(dtype, {"order": "F"}), (dtype, {"dtype": "float32", "clamp": True})]  # the real part
    return ([(dtype, {"order": "F"})] + [(dtype, {"dtype": "float32", "clamp": c}) for c in (False, True)]
            + [("float32", {"dtype": dtype, "clamp": c}) for c in (False, True)])


OPERATION = Operation(
    name="copy",
    summary="Copy an image file, optionally to another order, element type or format (chosen by OUT's "
            "extension).",
    examples=("noa copy stack.tif stack.mrc --order F --dtype float32",),
    params=(Param("order", Choice(("C", "F", "K")), "Memory order of the output: C, F, or K (keep the input's).",
                  default="C"),
            Param("dtype", Choice(ELEMENT_TYPES), "Convert to this element type (e.g. float32, int16, uint8)."),
            Param("clamp", Flag(), "Clamp values to the range of dtype (NaN -> 0 for integers); without it, "
                  "values that do not fit are refused.", default=False),
            UINT8_MODE, *READING, DEVICE),
    plan=plan,
    chooses_format=True,
    warmup=warmup,
)
