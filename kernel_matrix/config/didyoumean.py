"""'Did you mean': the known name closest to a mistyped one, for every message
about a name that is not known (a key, a version, a variant, a kernel)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# difflib's default. Lower cutoffs pair short names that share a letter or two
# (0.5 offers "cuda" for "cpu"), which misleads more than it helps.
CUTOFF = 0.6


def did_you_mean(value: object, choices: Iterable[object], *, quote: str = "") -> str:
    """ "; did you mean X?" for the choice closest to value (each side of it
    `quote`), or "" when none is close enough."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=CUTOFF)
    return f"; did you mean {quote}{close[0]}{quote}?" if close else ""
