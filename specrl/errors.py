"""User errors: bad input (a value, a path, a file), not a bug in specrl. `specrl` ends one, or a plain
`ValueError` or `OSError` (`USER_ERRORS`), with one line on stderr and a non-zero exit code (`specrl.cli.main`);
anything else keeps its traceback (`SPECRL_DEBUG=1` shows it for user errors too). Each class also derives from
the builtin type library callers already catch. `Terminated` (SIGTERM) lives here so that loops of any layer can
raise it again."""
from __future__ import annotations

import threading


class UserError(Exception):
    """Bad input; the message names the bad value, what was expected and the fix."""

    exit_code = 2


class MissingFileError(UserError, FileNotFoundError):
    """An input path (checkpoint, prompts file, run directory) does not exist."""


class MissingDependency(UserError, ImportError):
    """An optional package a chosen feature needs is not installed; the message says what to install."""


class InputFormatError(UserError, ValueError):
    """An input file exists but is malformed (bad JSON line, missing field)."""


class ConfigError(UserError, ValueError):
    """A config value or key is wrong; the message names it, what was expected and the fix."""


def require(ok: bool, key: str, value, expected: str, fix: str = "") -> None:
    """The check of every config class's ``validate()``: a ConfigError naming key, value, expectation and fix."""
    if not ok:
        msg = f"{key}={value!r} is invalid: expected {expected}"
        raise ConfigError(f"{msg}; {fix}" if fix else msg)


def require_min(config, low: int, *keys: str) -> None:
    for key in keys:
        require(getattr(config, key) >= low, key, getattr(config, key), f">= {low}")


def pyplot(needed_by: str):
    """matplotlib.pyplot on the headless Agg backend; without matplotlib (optional) a MissingDependency."""
    try:
        import matplotlib
    except ImportError as e:
        raise MissingDependency(f"{needed_by} needs matplotlib: pip install matplotlib (or 'specrl[plots]')") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


USER_ERRORS = (UserError, ValueError, OSError)


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (`specrl.cli.main` raises it from its handler): unwinds like Ctrl-C, exit code 143."""


TERMINATING = threading.Event()  # set by that handler: the command is stopping


def raise_if_terminating() -> None:
    """Raise Terminated again where a loop of ours asks: a handler's exception raised inside a library's
    wait is lost where that library retries the interrupted call (pyzmq's poll inside vLLM's engine start
    does), and the second SIGTERM that would raise it again is ignored during cleanup."""
    if TERMINATING.is_set():
        raise Terminated("terminated by SIGTERM (raised again: the first raise was lost inside a library)")
