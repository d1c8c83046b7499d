"""config [show] | get | set | unset | path."""


from typing import Annotated, Any

import typer

from agentbox.cli.app import JsonFlag, app, session
from agentbox.cli.options import complete_setting

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
    """Print where config.toml lives (on stderr: whether it is there yet).

    The path alone goes to stdout, for scripts; a person looking for the file is
    told on stderr when there is nothing there, so an empty folder is no puzzle.
    """
    from agentbox import paths, render

    path = paths.config_path()
    render.data(str(path))
    if path.exists():
        return
    missing = "" if path.parent.is_dir() else f", nor its folder {path.parent}"
    render.notice(f"no config file there yet{missing}; every setting has its default "
                  "until `agentbox config set` writes one")


@config_app.command("show")
def config_show(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """The settings in force for this user, and where each comes from.

    The webhook sources and outbox channels config.toml names follow, as
    sources.NAME.KEY and channels.NAME.KEY.
    """
    _show(ctx, as_json)


def _show(ctx: typer.Context, as_json: bool) -> None:
    from agentbox import channels, config, paths, render, sources

    sess = session(ctx)
    settings = sess.settings()
    rows = [{"key": key, "value": "(set)" if known.secret and settings.value(key) is not None
             else settings.value(key), "origin": settings.origins[key],
             "help": config.described(key)} for key, known in config.KEYS.items()]
    path = paths.config_path()
    doc = config.load(path)
    for name, keys in sources.in_force(doc, path, sess.user).items():
        rows += [{"key": f"sources.{name}.{key}", "value": found.value, "origin": found.origin,
                  "help": sources.KEYS[key].help} for key, found in keys.items()]
    for name, keys in channels.in_force(doc, path, sess.user, settings).items():
        # quiet hours as written ("22:00-07:00"), not as the window they are read into
        rows += [{"key": f"channels.{name}.{key}", "value": found.written
                  if key == "quiet_hours" else found.value, "origin": found.origin,
                  "help": channels.KEY_HELP[key]} for key, found in keys.items()]
    render.records(rows, ["key", "value", "origin", "help"], as_json, title="settings",
                   text=["value", "help"])


KeyArg = Annotated[str, typer.Argument(help="A setting name (see `config show`).",
                                       autocompletion=complete_setting)]


def _shown(value: Any) -> str:
    """A setting's value for people: a command as the shell would write it."""
    import shlex

    if value is None:
        return "-"
    return shlex.join(value) if isinstance(value, list) else str(value)


@config_app.command("get")
def config_get(ctx: typer.Context, key: KeyArg, as_json: JsonFlag = False) -> None:
    """The value of one setting in force for this user, and where it comes from.

    The origin is `default`, `config` (the top level of config.toml) or
    `config [users.NAME]` (this user's table); JSON adds the value as written.
    """
    import json

    from agentbox import config, paths, render

    sess = session(ctx)
    path = paths.config_path()
    found = config.get_value(path, key, sess.user)
    if as_json:
        render.document({"key": key, "value": found.value, "origin": found.origin,
                         "written": found.written, "user": sess.user, "path": str(path)})
        return
    shown = _shown(found.value)
    where = "default" if found.origin == "default" else f"from {found.origin}"
    if found.written is not None and _shown(found.written) != shown:
        where += f", written {json.dumps(found.written, ensure_ascii=False)}"
    render.line(f"{key} = {shown}  ({where})")


AllUsersFlag = Annotated[bool, typer.Option(
    "--all-users", help="Change the default for every user instead of this user's table.")]


@config_app.command("set")
def config_set(
    ctx: typer.Context,
    key: KeyArg,
    value: Annotated[str, typer.Argument(help="Its new value.")],
    all_users: AllUsersFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Write one setting into config.toml (this user's table unless --all-users).

    The value is checked first; a bad one is refused (exit 2) and nothing is written.
    A webhook source's key is sources.NAME.KEY (see `agentbox serve --help`);
    a source table that is not complete yet is said on stderr. An outbox
    channel's key is channels.NAME.KEY (sender, gap, delivery, quiet_hours,
    urgent_in_quiet_hours, max_per_day).
    """
    from agentbox import config, paths, render
    from agentbox.errors import UsageError

    sess = session(ctx)
    user = None if all_users else sess.user
    path = paths.config_path()
    stored = config.set_value(path, key, value, user)
    if as_json:
        render.document({"key": key, "value": stored, "user": user, "path": str(path)})
    else:
        scope = "all users" if user is None else f"user {user}"
        render.line(f"{key} = {stored!r} for {scope} in {path}")
    if key.startswith("sources."):
        try:
            config.get_value(path, key, sess.user)
        except UsageError as exc:  # a table is written one key at a time: not an error yet
            render.notice(f"serve will not start until this is settled: {exc}")


@config_app.command("unset")
def config_unset(ctx: typer.Context, key: KeyArg, all_users: AllUsersFlag = False,
                 as_json: JsonFlag = False) -> None:
    """Remove one setting from config.toml (this user's table unless --all-users).

    Exit 0 also when it was not set there. Prints what is in force for this
    user afterwards.
    """
    from agentbox import config, paths, render
    from agentbox.errors import UsageError

    sess = session(ctx)
    user = None if all_users else sess.user
    path = paths.config_path()
    removed = config.unset_value(path, key, user)
    now: config.Lookup | None = None
    if key in config.KEYS or config.split_named(key) is not None:
        try:
            now = config.get_value(path, key, sess.user)
        except UsageError:  # another part of the file is still broken: the unset stands
            now = None
    if as_json:
        render.document({"key": key, "removed": removed, "user": user, "path": str(path),
                         "value": None if now is None else now.value,
                         "origin": None if now is None else now.origin})
        return
    scope = "all users" if user is None else f"user {user}"
    text = (f"{key} removed for {scope} in {path}" if removed
            else f"{key} was not set for {scope} in {path}")
    if now is not None:
        text += f"; in force for {sess.user} now: {_shown(now.value)} ({now.origin})"
    render.line(text)
