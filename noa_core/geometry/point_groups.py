"""Point-group names as RELION writes them: the one grammar every door reads (no NumPy: the declarations
import it). A name is ASCII, any case, with no spaces; its canonical spelling is upper case with the order
written without leading zeros (``c01`` is ``C1``). :mod:`noa_core.geometry.symmetry` builds the operators of a
canonical name."""

from __future__ import annotations

import re

from noa_core.errors import ParameterError

NAMES = "Cn, Ci, Cs, Cnv, Cnh, Sn (n even), Dn, Dnv, Dnh, T, Td, Th, O, Oh, I (= I2), I1-I4, Ih, I1h-I4h"
MAX_ORDER = 99  # RELION reads at most two digits
DESCRIPTION = f"{NAMES}; n from 1 to {MAX_ORDER}, any case"
# The names accepted, as a JSON Schema regex (the HTTP schema's pattern): Cn, Cnv, Cnh, Dn, Dnv, Dnh (n 1..99),
# Sn (n even), Ci, Cs, T, Td, Th, O, Oh, I, Ih, I1..I4, I1h..I4h; any case. read() accepts exactly these.
PATTERN = (r"^([CcDd](0?[1-9]|[1-9][0-9])[VvHh]?|[Ss](0?[2468]|[1-9][02468])|[Cc][IiSs]|[Tt][DdHh]?|[Oo][Hh]?"
           r"|[Ii][1-4]?[Hh]?)$")
# The same names read into their parts (upper case): letter, order, suffix | a word | I, setting, mirror.
PARTS = re.compile(r"(C|D|S)([0-9]{1,2})(V|H)?|(CI|CS|T|TD|TH|O|OH|I|IH)|I([1-5])(H)?", re.ASCII)


def read(text: str, param: str = "sym") -> str:
    """The canonical spelling of the point group ``text``; ParameterError (``param``) saying why it is none."""
    if not isinstance(text, str):
        raise ParameterError(f"{text!r} is not a point group name", param)
    parts = PARTS.fullmatch(text.upper()) if text.isascii() else None
    if parts is None:
        raise ParameterError(f"{text!r} is not a point group RELION knows; give one of {DESCRIPTION}", param)
    letter, digits, suffix, _word, setting, _mirrored = parts.groups()
    if setting == "5":
        raise ParameterError(f"{text!r}: RELION does not implement the icosahedral setting I5; give I1, I2, I3 or "
                             "I4", param)
    if letter is None:
        return text.upper()
    order = int(digits)
    if order < 1:
        raise ParameterError(f"{text!r}: the order n must be 1 to {MAX_ORDER}", param)
    if letter == "S" and (suffix is not None or order % 2):
        raise ParameterError(f"{text!r}: an S group has an even order and no suffix (RELION's rule)", param)
    return f"{letter}{order}{suffix or ''}"
