"""One rule for a setting given as a flag or as an environment variable: both are read by
the same reader, and a value it cannot read stops the command (exit status 2) with a
message naming the flag, the variable and what the setting accepts. Nothing falls back to
a default in silence: a variable that is set is read, or refused.

:class:`Parser` is the parser of each ``keras-attn`` command; :meth:`Parser.add_setting`
declares a setting with its variable. The readers (:func:`integer`, :func:`number`,
:func:`choice`, :func:`switch`, :func:`path`, :func:`pattern`) raise
``argparse.ArgumentTypeError`` saying what they accept.

Example:
    >>> p = Parser(prog="serve")
    >>> p.add_setting("--port", "LT_PORT", 5000, "port", read=integer(0, 65535))
    >>> p.parse_args([]).port                   # with LT_PORT=8000 in the environment
    8000
    >>> p.parse_args([])                        # with LT_PORT=http: exit status 2,
    serve: error: LT_PORT='http' (the variable of --port): expected an integer from 0 to 65535
"""
import argparse
import math
import os
import re

TRUE = ("true", "1", "yes", "on")
FALSE = ("false", "0", "no", "off")


class Unset:
    """The default of a setting that neither its flag nor its variable gave (its help
    prints the default itself)."""

    def __init__(self, default):
        self.default = default

    def __str__(self):
        return str(self.default)

    def __repr__(self):
        return repr(self.default)


def _refuse(accepts, text):
    return argparse.ArgumentTypeError(f"expected {accepts}. Received: {text!r}")


def integer(low, high=None, note=""):
    """A reader of an integer from ``low`` (to ``high``); ``note``: what a bound means."""
    accepts = (f"an integer from {low} to {high}" if high is not None
               else f"an integer >= {low}") + note

    def read(text):
        try:
            value = int(str(text).strip())
        except ValueError:
            raise _refuse(accepts, text) from None
        if value < low or (high is not None and value > high):
            raise _refuse(accepts, text)
        return value

    read.accepts = accepts
    return read


def number(low, above=False):
    """A reader of a finite number ``>= low`` (``above``: ``> low``)."""
    accepts = f"a number {'>' if above else '>='} {low:g}"

    def read(text):
        try:
            value = float(str(text).strip())
        except ValueError:
            raise _refuse(accepts, text) from None
        if not math.isfinite(value) or value < low or (above and value == low):
            raise _refuse(accepts, text)
        return value

    read.accepts = accepts
    return read


def choice(options):
    """A reader of one of ``options`` (exactly as written)."""
    accepts = "one of " + ", ".join(options)

    def read(text):
        if text not in options:
            raise _refuse(accepts, text)
        return text

    read.accepts = accepts
    return read


def switch(text):
    """A switch's variable: true (``true``, ``1``, ``yes``, ``on``) or false (``false``,
    ``0``, ``no``, ``off``), in any case; anything else is refused."""
    word = str(text).strip().lower()
    if word in TRUE:
        return True
    if word in FALSE:
        return False
    raise _refuse(switch.accepts, text)


switch.accepts = "true or false (1/0, yes/no, on/off)"


def path(what):
    """A reader of a file path (not empty, not an existing folder): ``what`` names it."""
    accepts = f"the path of {what}"

    def read(text):
        if not str(text).strip():
            raise _refuse(accepts, text)
        if os.path.isdir(text):
            raise argparse.ArgumentTypeError(f"{text!r} is a folder; expected {accepts}")
        return text

    read.accepts = accepts
    return read


def folder(what):
    """A reader of a folder path (not empty, not an existing file)."""
    accepts = f"the path of {what}"

    def read(text):
        if not str(text).strip():
            raise _refuse(accepts, text)
        if os.path.exists(text) and not os.path.isdir(text):
            raise argparse.ArgumentTypeError(f"{text!r} is a file; expected {accepts}")
        return text

    read.accepts = accepts
    return read


def pattern(regex, accepts, convert=None):
    """A reader of a string that matches ``regex`` whole (``convert``: applied after)."""
    compiled = re.compile(regex)

    def read(text):
        if not compiled.fullmatch(str(text)):
            raise _refuse(accepts, text)
        return convert(text) if convert else text

    read.accepts = accepts
    return read


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose settings also read an environment variable each
    (:meth:`add_setting`): a flag given wins; else the variable, when set, read by the
    flag's own reader; else the default. An unreadable value of either stops parsing with
    ``error`` (exit status 2) naming the flag and the variable.

    Attributes:
        settings: ``{dest: (flag, variable, reader)}`` of the declared settings.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.settings = {}

    def add_setting(self, flag, env, default, help, read=None, is_switch=False,
                    env_read=None, **kwargs):
        """Declare ``flag`` with its variable ``env``: ``read`` (a reader of this module)
        reads both; ``is_switch``: a flag without a value, its variable read by
        :func:`switch`; ``env_read``: the variable's own reader where its words say more
        than the flag's value can (``LT_API_KEYS=true``: the flag without a value). Other
        keyword arguments go to ``add_argument``."""
        if is_switch:
            read, kwargs = switch, dict(kwargs, action="store_true")
        elif read is None:
            raise ValueError(f"a setting needs a reader (read=...). Received: {flag} read=None")
        else:
            kwargs["type"] = read
        action = self.add_argument(flag, default=Unset(default),
                                   help=f"{help} [env {env}]", **kwargs)
        self.settings[action.dest] = (flag, env, env_read or read)
        return action

    def parse_known_args(self, args=None, namespace=None):
        namespace, rest = super().parse_known_args(args, namespace)
        for dest, (flag, env, read) in self.settings.items():
            value = getattr(namespace, dest, None)
            if not isinstance(value, Unset):
                continue  # the flag was given (and read)
            text = os.environ.get(env)
            if text is None:
                setattr(namespace, dest, value.default)
                continue
            try:
                setattr(namespace, dest, read(text))
            except (argparse.ArgumentTypeError, ValueError) as e:
                self.error(f"{env}={text!r} (the variable of {flag}): {e}")
        return namespace, rest
