"""The root `launcher` command as a lazily-resolved click group.

Building typer's click objects for every command (and importing typer and every
command module) costs more than the rest of `launcher --help` together. So `main()`
runs a plain `click.Group` that knows each top-level command's name, help and the
modules that define it from the index (cli_index.py), and imports and converts
(with typer) only the command actually run. Help listings use stand-ins built from
the index, so `launcher --help` reads the same as typer's own group.
"""

from __future__ import annotations

from typing import Any

import click

from launcher.cli.cli_index import full_group, load_index

__all__ = ["LazyGroup", "root_group"]


class LazyGroup(click.Group):
    """A click group over the index: listing and help need no command object; running
    a command imports its modules and converts just that command with typer."""

    def __init__(self, index: dict[str, Any]) -> None:
        super().__init__(
            name="",
            help=index["help"],
            no_args_is_help=index["no_args_is_help"],
            context_settings=index["context_settings"],
            params=[click.Option(["--version", "-V"], is_flag=True, expose_value=False,
                                 is_eager=True, callback=_show_version,
                                 help="Show the version and exit.")],
        )
        self._entries: dict[str, dict[str, Any]] = {c["name"]: c for c in index["commands"]}
        self._built: dict[str, click.Command] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self._entries)  # registration order, as typer shows them

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self._entries:
            return None
        cmd = self._built.get(cmd_name)
        if cmd is None:
            cmd = self._built[cmd_name] = _build_one(cmd_name, self._entries[cmd_name]["modules"])
        return cmd

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as err:
            if args and args[0] not in self._entries:  # as typer does: suggest close names
                from difflib import get_close_matches

                matches = get_close_matches(args[0], list(self._entries))
                if matches:
                    names = ", ".join(repr(m) for m in matches)
                    # a new error: click >= 8.2 declares `message` Final
                    raise click.UsageError(
                        f"{err.message.rstrip('.')}. Did you mean {names}?", err.ctx
                    ) from err
            raise

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click's own listing, fed by stand-in commands built from the index
        shown = [
            (name, click.Command(name, help=e["help"], short_help=e["short_help"],
                                 deprecated=e["deprecated"]))
            for name, e in self._entries.items()
            if not e["hidden"]
        ]  # fmt: skip
        if not shown:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in shown)
        rows = [(name, cmd.get_short_help_str(limit)) for name, cmd in shown]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        from launcher import __version__

        click.echo(f"launcher {__version__}")
        ctx.exit(0)


def _build_one(name: str, modules: list[str]) -> click.Command:
    import importlib

    import typer.main

    from launcher.cli.app import app

    for module in modules:
        importlib.import_module(module)
    for info in app.registered_commands:
        assert info.callback is not None
        if (info.name or typer.main.get_command_name(info.callback.__name__)) == name:
            return typer.main.get_command_from_info(
                info,
                pretty_exceptions_short=app.pretty_exceptions_short,
                rich_markup_mode=app.rich_markup_mode,
            )
    for ginfo in app.registered_groups:
        if ginfo.name == name:
            return typer.main.get_group_from_info(
                ginfo,
                pretty_exceptions_short=app.pretty_exceptions_short,
                rich_markup_mode=app.rich_markup_mode,
                suggest_commands=app.suggest_commands,
            )
    # the index is stale in a way the key did not catch: use the full group
    cmd = full_group().commands.get(name)
    if cmd is None:
        raise click.UsageError(f"No such command '{name}'.")
    return cmd


def root_group() -> click.Group:
    """The group `main()` runs."""
    return LazyGroup(load_index())
