"""config [show] | set | path."""


from typing import Annotated

import typer

from agentbox.cli.app import JsonFlag, app, session

config_app = typer.Typer(help="Show and change settings (config.toml).",
                         invoke_without_command=True)
app.add_typer(config_app, name="config")


@config_app.callback()
def config(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Show and change settings (config.toml); alone, the same as `config show`."""
    if ctx.invoked_subcommand is None:
        _show(ctx, as_json)


@config_app.command("path")
def config_path() -> None:
    """Print where config.toml lives."""
    from agentbox import paths, render

    render.data(str(paths.config_path()))


@config_app.command("show")
def config_show(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """The settings in force for this user, and where each comes from."""
    _show(ctx, as_json)


def _show(ctx: typer.Context, as_json: bool) -> None:
    from agentbox import render
    from agentbox.config import KEYS

    settings = session(ctx).settings()
    values = {**settings.policy._asdict(), "handler": settings.handler, "sender": settings.sender}
    rows = [{"key": key, "value": values.get(key), "origin": settings.origins[key],
             "help": KEYS[key].help} for key in KEYS]
    render.records(rows, ["key", "value", "origin", "help"], as_json, title="settings")


@config_app.command("set")
def config_set(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="A setting name (see `config show`).")],
    value: Annotated[str, typer.Argument(help="Its new value.")],
    all_users: Annotated[bool, typer.Option(
        "--all-users", help="Set the default for every user instead of this user only.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Write one setting into config.toml (this user's table unless --all-users).

    The value is checked first; a bad one is refused (exit 2) and nothing is written.
    """
    from agentbox import config, paths, render

    sess = session(ctx)
    user = None if all_users else sess.user
    path = paths.config_path()
    stored = config.set_value(path, key, value, user)
    if as_json:
        render.document({"key": key, "value": stored, "user": user, "path": str(path)})
        return
    scope = "all users" if user is None else f"user {user}"
    render.line(f"{key} = {stored!r} for {scope} in {path}")
