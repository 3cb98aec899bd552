"""What every `fleet` command shares: the exit codes, the two errors the
entry point turns into them, a command's parser with its settings, and the
settings read from its flags and the environment.

The registry (`fleet.cli.subcommands`) imports the command modules and this
one; a command module imports this one, never the registry. Which settings a
command takes is said once, as the `GROUPS` of `fleet.settings` it names in
`command(...)`: it accepts and lists those flags only (the environment still
gives every setting, which is what the processes it starts read).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fleet.durations import parse_duration
from fleet.settings import GROUPS, OPTIONS, Option, Settings, SettingsError
from providers.text import show

if TYPE_CHECKING:
    from fleet.config import ProvidersConfig

EXIT_OK, EXIT_NOT_READY, EXIT_BAD_INPUT, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for git or kubectl whose reader went away

# The names `fleet get` and `fleet describe` know each resource by (kubectl's: singular, plural, short name).
PROXY_NAMES = ("px", "proxy", "proxies")
PH_NAMES = ("ph", "providerhealth", "providerhealths")
POOL_NAMES = ("pools", "pool", "pxp", "proxypool", "proxypools")

ALL_GROUPS: tuple[str, ...] = tuple(GROUPS)
# The settings groups of the Celery processes (worker, controller, beat): one app, every task's settings.
CELERY_GROUPS = ("process", "store", "providers", "cluster", "metrics", "health", "proxies", "reconciler", "gc", "leases")


class BadInput(Exception):
    """A flag, an environment variable or the providers file is wrong: exit 2."""


class Unreachable(Exception):
    """A backend fleet needs (Redis) does not answer: exit 3."""


_SETTING_DESTS = frozenset(o.attr for o in OPTIONS)


class _OwnUsage(argparse.RawDescriptionHelpFormatter):
    """A usage line with the command's own arguments and `[settings]` for the shared ones (they made each
    usage error a screenful); `--help` lists them below the command's own, grouped."""

    def _format_usage(self, usage: str | None, actions: Any, groups: Any, prefix: str | None) -> str:
        own = [a for a in actions if a.dest not in _SETTING_DESTS]
        text = super()._format_usage(usage, own, groups, prefix)
        return text.replace(self._prog, self._prog + " [settings]", 1) if len(own) < len(actions) else text


def command(sub: Any, name: str, *, help: str, example: str, groups: Sequence[str]) -> argparse.ArgumentParser:
    """The parser of `fleet NAME`: `help` (one line) and `example` at the top of its --help, its own
    arguments (the caller adds them) and then the settings of `groups`, a titled section each."""
    unknown = set(groups) - set(GROUPS)
    if unknown:
        raise ValueError(f"fleet {name}: unknown settings groups {sorted(unknown)}")
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=f"{help}\n\nexample: {example}", formatter_class=_OwnUsage)
    for group in GROUPS:  # the table's order, whatever order `groups` names them in
        if group in groups:
            section = p.add_argument_group(f"{group} settings ({GROUPS[group]})")
            for opt in OPTIONS:
                if opt.group == group:
                    _add_setting(section, opt)
    return p


def _add_setting(section: Any, opt: Option) -> None:
    names = [f"--{opt.flag}"] + ([f"-{opt.short}"] if opt.short else [])
    text = f"{opt.help_text} [{opt.env}]".replace("%", "%%")  # argparse %-formats help
    if opt.kind != "bool":
        section.add_argument(*names, dest=opt.attr, default=None, help=text)
        return
    # A switch: given alone it is true; `--flag false` (or true) still reads as before.
    section.add_argument(*names, dest=opt.attr, default=None, nargs="?", const="true", metavar="true|false", help=text)
    if opt.default is True:
        section.add_argument(f"--no-{opt.flag}", dest=opt.attr, action="store_const", const="false",
                             help=f"turn --{opt.flag} off")


def settings_from(args: argparse.Namespace) -> Settings:
    """The flags this command took (given, even empty: they beat the environment), else the environment."""
    flags = {o.attr: getattr(args, o.attr, None) for o in OPTIONS}
    try:
        return Settings.from_sources(flags, os.environ)
    except SettingsError as exc:
        raise BadInput(str(exc)) from None


def run_process(args: argparse.Namespace, main: Callable[[Settings], int], refusal: type[Exception]) -> int:
    """A process of its own (api, gateway, prober): its settings, then its `main` until it stops; what `main`
    refuses at start (`refusal`: a missing file, a bad token or target) is bad input, exit 2."""
    settings = settings_from(args)
    try:
        return main(settings)
    except refusal as exc:
        raise BadInput(str(exc)) from None


def config_from(settings: Settings, required: bool = True) -> ProvidersConfig | None:
    from fleet.config import ConfigError, load

    if not settings.providers_config:
        if required:
            raise BadInput("--providers-config (-c) or FLEET_PROVIDERS_CONFIG is required")
        return None
    try:
        return load(settings.providers_config)
    except ConfigError as exc:
        raise BadInput(exc.report()) from None


def duration(text: str, flag: str, maximum: float | None = None) -> float:
    try:
        return parse_duration(text) if maximum is None else parse_duration(text, maximum)
    except ValueError as exc:
        raise BadInput(f"{flag}: {exc}") from None


def positive_duration(text: str, flag: str, maximum: float) -> float:
    seconds = duration(text, flag, maximum)
    if seconds <= 0:
        raise BadInput(f"{flag} must be positive, got {show(text)}")
    return seconds
