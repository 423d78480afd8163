"""``slurm-hooks nhc import FILE``: translate an LBNL NHC config into site checks.

Prints the equivalent ``[[site_checks]]`` (TOML, or ``--json``) on stdout;
every line it could not translate is listed on stderr with the reason.
Exit status: 0 every check line translated, 1 some were not, 2 the file
could not be read.  docs/nhc.md has the migration guide.
"""

from __future__ import annotations

import json
import sys

import click

from slurm_hooks.cli import EXIT_ERROR, EXIT_OK, EXIT_UNHEALTHY


def _not_defined_here(rows: list[dict[str, object]]) -> list[tuple[str, str]]:
    """(function, scripts dir) of each nhc_function row whose directory is
    on this host (an NHC host) and defines no such function."""
    from slurm_hooks.detect.site.args import NhcFunction
    from slurm_hooks.detect.site.nhc_function import defined_here

    out: list[tuple[str, str]] = []
    seen: dict[str, set[str] | None] = {}
    for r in rows:
        if r["kind"] != "nhc_function":
            continue
        fn, where = str(r["function"]), str(r.get("scripts_dir", NhcFunction.scripts_dir))
        if where not in seen:
            seen[where] = defined_here(where)
        names = seen[where]
        if names is not None and fn not in names and (fn, where) not in out:
            out.append((fn, where))
    return out


@click.group("nhc")
def command() -> None:
    """Move off LBNL NHC: translate its config, then compare side by side.

    \b
    Example:
      slurm-hooks nhc import /etc/nhc/nhc.conf > /etc/slurm-hooks/site-checks.toml
    """


@command.command("import")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report instead of TOML.")
@click.option(
    "--group",
    "groups",
    multiple=True,
    metavar="NAME=HOSTLIST|feature:F",
    help="What the target @NAME means: a hostlist, or feature:F for a Slurm node feature.",
)
@click.option(
    "--sysconfig",
    type=click.Path(dir_okay=False, exists=True),
    help="NHC's /etc/sysconfig/nhc: the values its $VARIABLES expand to.",
)
@click.option("--var", "variables", multiple=True, metavar="NAME=VALUE", help="One more variable.")
def import_cmd(
    file: str,
    as_json: bool,
    groups: tuple[str, ...],
    sysconfig: str | None,
    variables: tuple[str, ...],
) -> None:
    """Translate FILE (an nhc.conf; - for stdin) into [[site_checks]].

    Exit status 0 when every check line translated, 1 when some did not
    (each is listed on stderr with the reason), 2 when FILE cannot be read.

    \b
    Example:
      slurm-hooks nhc import --sysconfig /etc/sysconfig/nhc /etc/nhc/nhc.conf
    """
    from slurm_hooks.detect.site.nhc_import import (
        SYSCONFIG_GIVEN,
        import_conf,
        read_sysconfig,
        to_json,
        to_toml,
    )

    values: dict[str, str] = {}
    if sysconfig:
        with open(sysconfig, encoding="utf-8", errors="replace") as f:
            values.update(read_sysconfig(f.read()))
        values[SYSCONFIG_GIVEN] = "1"
    for item in variables:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.UsageError(f"--var wants NAME=VALUE, got {item!r}")
        values[name] = value

    group_map = {}
    for g in groups:
        name, sep, spec = g.partition("=")
        if not sep or not name or not spec:
            raise click.UsageError(f"--group wants NAME=HOSTLIST or NAME=feature:F, got {g!r}")
        group_map[name.lstrip("@")] = spec
    try:
        if file == "-":
            text = sys.stdin.read()
        else:
            with open(file, encoding="utf-8", errors="replace") as f:
                text = f.read()
    except OSError as exc:
        click.echo(f"slurm-hooks: error: cannot read {file}: {exc.strerror or exc}", err=True)
        sys.exit(EXIT_ERROR)
    imp = import_conf(text, groups=group_map, variables=values)
    if as_json:
        click.echo(json.dumps(to_json(imp), indent=2))
    else:
        click.echo(to_toml(imp, source=file), nl=False)
    click.echo(
        f"{len(imp.translated)} of {imp.check_lines} check line(s) translated ({imp.ratio:.0%});"
        f" {len(imp.settings)} setting(s); {len(imp.untranslated)} not translated",
        err=True,
    )
    if imp.site_functions:
        click.echo(
            "  the site's own NHC functions keep running (kind nhc_function, their code, not a "
            f"translation): {', '.join(imp.site_functions)}",
            err=True,
        )
    for fn, where in _not_defined_here(imp.rows):
        click.echo(
            f"  warning: {fn}: no *.nhc in {where} on this host defines it; "
            "where that holds on a node, the check fails there",
            err=True,
        )
    for u in imp.untranslated:
        click.echo(
            f"  line {u.line.lineno}: {u.line.text}\n    not translated: {u.reason}", err=True
        )
    sys.exit(EXIT_OK if imp.complete else EXIT_UNHEALTHY)
