"""The kit's one error base: ``KitError``, a failure the user can act on, with the exit code a
command ends with when it escapes the command's ``main()``.

``str(e)`` is one line that names the value and says what is valid or what to do; the command
door (kit/cli.py ``run_command``) prints it as ``<prog>: <message>`` on stderr and exits with
``exit_code``, never a traceback. A class keeps its other bases (``ValueError``, ``OSError`` ...)
where callers catch those.

Exit codes the kit's commands use (each command's docstring says which of them it can end with):

    0    done
    1    the command ran but could not do its job: something blocks, exists or bills, a check
         found problems, a result could not be written
    2    bad input: an option, a file or a configuration value (the default)
    3    nothing was measured (harness.bench: a dead server must not look like a measured one)
    130  interrupted (Ctrl-C)

Standard library only, no import from the rest of the kit.
"""
from __future__ import annotations


class KitError(Exception):
    """A failure the user can act on; ``str(e)`` is one line. ``exit_code``: what a command exits
    with when this escapes its ``main()`` (2, bad input, unless a subclass says otherwise)."""

    exit_code = 2


class UsageError(KitError):
    """Bad command-line input (an option argparse refuses, or a value the command checks itself):
    one line, exit 2."""


class CommandFailed(KitError):
    """The command ran but could not do its job (nothing measured for what was asked, a check
    that could not be made): one line, exit 1."""

    exit_code = 1
