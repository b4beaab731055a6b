"""The error of bad input."""
from __future__ import annotations


class ConfigError(ValueError):
    """An option has a value the simulator cannot run with; the message names it (one line: the
    command line prints it and exits with code 2)."""
