"""Quick mode: small sample counts and token budgets, for CI and for a first look.

The switch is the environment variable SPECREF_QUICK.  Accepted values (case and
surrounding spaces ignored):

    unset, "", "0", "false", "no", "off"   full sizes (the default)
    "1", "true", "yes", "on"               quick mode

Any other value raises ValueError rather than guessing.  The notebooks and
`python -m specref figures` read it through `quick_mode()`.

Standard library only, so a notebook can read the switch before importing anything heavy.
"""

from __future__ import annotations

import os

ENV_VAR = "SPECREF_QUICK"
OFF = ("", "0", "false", "no", "off")
ON = ("1", "true", "yes", "on")


def quick_mode(environ=None) -> bool:
    """True when SPECREF_QUICK asks for quick mode (see the module docstring for the values).

    `environ` defaults to os.environ; tests pass a dict."""
    raw = (os.environ if environ is None else environ).get(ENV_VAR, "")
    value = raw.strip().lower()
    if value in ON:
        return True
    if value in OFF:
        return False
    raise ValueError(f"{ENV_VAR}={raw!r} is not recognised: use {'/'.join(ON)} for quick mode, "
                     f"or {'/'.join(OFF[1:])}, an empty string or no variable at all for the full sizes")
