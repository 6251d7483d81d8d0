"""The base of errors whose message is for the user: it names the problem and the place.

The CLI prints these as one line and exits non-zero; anything else is a bug and shows a traceback.
"""

from __future__ import annotations


class UserFacingError(Exception):
    """Bad input, an unreachable store, a refused request: the message says what and where."""
