"""What a web client sees names no path of the server: its private directory of custom configs and --config-dir.

The answers of the commands name the config they read (`source`: "config.json at PATH", the launch text's
--model, error messages quoting a file) and the X-Trainledger-Argv header the argv that ran (`--model=PATH`).
For a custom model (arch.* fields, a POSTed config.json) PATH is a file of this process's private temporary
directory; for `model=NAME.json` a file of --config-dir. Both are shown to the client as the file's own name,
the name it asked by (or the client's own copy of the config it sent): the server's directories (its user name,
its layout, its temporary directory) stay on the server.
"""

from __future__ import annotations

import os


def server_folders(settings) -> list[str]:
    """The directories of the server whose paths are hidden: the private config store's and --config-dir (both
    as given and resolved), longest first."""
    from trainledger.web.guard import STORE
    folders = {str(STORE.folder)} if STORE.folder is not None else set()
    if getattr(settings, "config_dir", None) is not None:
        folders |= {str(settings.config_dir), os.path.realpath(settings.config_dir)}
    return sorted(folders, key=len, reverse=True)


def hide_paths(value, folders: list[str]):
    """`value` (a JSON answer, an argv list, a string) with every `folder/` of `folders` removed from its strings,
    so that folder/name.json reads name.json; other values unchanged."""
    if not folders or value is None:
        return value
    if isinstance(value, str):
        for folder in folders:
            value = value.replace(folder.rstrip(os.sep) + os.sep, "")
        return value
    if isinstance(value, dict):
        return {hide_paths(k, folders): hide_paths(v, folders) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [hide_paths(v, folders) for v in value]
    return value
