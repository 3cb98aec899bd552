"""The `fleet` command (console script `fleet = "fleet.cli:main"`, and
`python -m fleet.cli`): `subcommands` has the parser and the subcommands (the
registry: it imports the command modules `gc`, `api`, `gateway`, `prober`,
`pools`, which share `common` and never import it), `tables` prints results, `supervise` runs `fleet up`, `render` writes the manifests,
`probe` is the exec probe, `commands` holds each role's command line.

`subcommands` is imported on call, so `fleet.cli.probe` (run in every pod's probe)
and `fleet.cli.commands` stay light.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from fleet.cli.subcommands import main as run

    return run(argv)
