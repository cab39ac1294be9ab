"""Backups that restore: `ragmux backup` and `ragmux restore`.

A backup is one tar file holding the database as `pg_dump` writes it in custom format and a
manifest. The dump is made by a `pg_dump` of the server's own major version (the embedded
PostgreSQL's bundled binaries first: a system `pg_dump` of another version either refuses a newer
server or writes what an older one cannot read). The manifest names the encryption key only by
its check value, the sealed proof the database already holds (`encryption_key_check`): the key
itself is never in a backup, so a stolen backup opens no credential, and a restore can say before
touching anything whether the key it runs with is the one the backup needs.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from django.db import connection

FORMAT = "ragmux-backup/1"
MANIFEST_NAME = "manifest.json"
DUMP_NAME = "database.dump"
# The database's figures a manifest reports, so an operator can tell two backups apart.
COUNTED_TABLES = {
    "stores": "rag_stores",
    "documents": "documents",
    "chunks": "chunks",
    "connections": "model_connections",
}
# Tables whose rows a backup leaves out (their definitions stay): a dashboard session's key is
# its cookie, so a backup holding them would be a login to whoever reads it. Sign-in throttle
# state lives in Redis and is never in a backup either.
UNSAVED_TABLE_DATA = ("django_session",)


class BackupFailed(Exception):
    pass


@dataclass(frozen=True)
class PgTool:
    path: str
    major: int


def _tool_major(path: str) -> int | None:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"\) (\d+)", out) or re.search(r"(\d+)\.\d+", out)
    return int(found.group(1)) if found else None


def _candidates(name: str, major: int) -> list[str]:
    from ragmux.launch.embedded import pg_tool

    paths = [pg_tool(name), f"/usr/lib/postgresql/{major}/bin/{name}", shutil.which(name)]
    return list(dict.fromkeys(path for path in paths if path and os.path.exists(path)))


def find_pg_tool(name: str, server_major: int) -> PgTool:
    """The client tool of the server's major version; failing that, the nearest newer one (which
    still reads and writes that server's dumps). An older one is refused: it cannot."""
    found = [PgTool(path, major) for path in _candidates(name, server_major) if (major := _tool_major(path))]
    usable = sorted((tool for tool in found if tool.major >= server_major), key=lambda tool: tool.major)
    if not usable:
        seen = ", ".join(f"{tool.path} ({tool.major})" for tool in found) or "none"
        raise BackupFailed(f"no {name} of PostgreSQL {server_major} or newer was found (seen: {seen})")
    return usable[0]


def server_major() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version_num")
        return int(cursor.fetchone()[0]) // 10000


def _libpq_arguments() -> tuple[list[str], dict[str, str]]:
    """The connection as command-line options, the password in the environment (never in the
    process list)."""
    params = connection.get_connection_params()
    arguments = ["--dbname", params.get("dbname") or connection.settings_dict["NAME"]]
    for option, key in (("--host", "host"), ("--port", "port"), ("--username", "user")):
        if params.get(key):
            arguments += [option, str(params[key])]
    env = dict(os.environ)
    if params.get("password"):
        env["PGPASSWORD"] = str(params["password"])
    return arguments, env


def _run(command: list[str], env: dict[str, str], what: str) -> None:
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BackupFailed(f"{what} failed: {result.stderr.strip()[-2000:] or f'exit {result.returncode}'}")


def _key_check_value() -> str | None:
    from ragmux.core.encryption_key_check import KEY_CHECK_NAME
    from ragmux.core.models import InstanceSetting

    row = InstanceSetting.objects.filter(key=KEY_CHECK_NAME).first()
    return base64.b64encode(bytes(row.value)).decode() if row else None


def _applied_migrations() -> dict[str, str]:
    from django.db.migrations.recorder import MigrationRecorder

    latest: dict[str, str] = {}
    for app, name in MigrationRecorder(connection).migration_qs.order_by("app", "name").values_list("app", "name"):
        latest[app] = name
    return latest


def _counts() -> dict[str, int]:
    with connection.cursor() as cursor:
        counts = {}
        for label, table in COUNTED_TABLES.items():
            cursor.execute(f"SELECT count(*) FROM {table}")  # noqa: S608 - table names are ours
            counts[label] = cursor.fetchone()[0]
        return counts


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def backup_file_name(now: datetime) -> str:
    return f"ragmux-backup-{now.strftime('%Y%m%dT%H%M%SZ')}.tar"


def backup_create(*, target: Path, version: str) -> tuple[Path, dict]:
    """Writes a backup to ``target`` (a folder, where a dated file is made, or a file name) and
    returns its path and manifest. The file appears only once complete, readable by its owner
    alone."""
    now = datetime.now(UTC)
    path = target / backup_file_name(now) if target.is_dir() else target
    major = server_major()
    pg_dump = find_pg_tool("pg_dump", major)
    arguments, env = _libpq_arguments()
    with tempfile.TemporaryDirectory(prefix=".ragmux-backup-", dir=path.parent) as work:
        dump = Path(work) / DUMP_NAME
        unsaved = [f"--exclude-table-data={table}" for table in UNSAVED_TABLE_DATA]
        _run([pg_dump.path, "--format=custom", "--no-owner", *unsaved, "--file", str(dump), *arguments], env, "pg_dump")
        manifest = {
            "format": FORMAT,
            "created_at": now.isoformat().replace("+00:00", "Z"),
            "ragmux_version": version,
            "postgres_server_major": major,
            "pg_dump_major": pg_dump.major,
            "database": connection.settings_dict["NAME"],
            "migrations": _applied_migrations(),
            "counts": _counts(),
            "encryption_key_check": _key_check_value(),
            "dump_bytes": dump.stat().st_size,
            "dump_sha256": _sha256(dump),
        }
        partial = Path(work) / "backup.tar"
        with tarfile.open(partial, "w") as archive:
            body = json.dumps(manifest, indent=2).encode()
            info = tarfile.TarInfo(MANIFEST_NAME)
            info.size, info.mtime, info.mode = len(body), int(now.timestamp()), 0o600
            archive.addfile(info, io.BytesIO(body))
            archive.add(dump, arcname=DUMP_NAME)
        partial.chmod(0o600)
        partial.replace(path)
    return path, manifest


def read_backup(path: Path, into: Path) -> tuple[dict, Path]:
    """The manifest, and the dump copied into ``into`` after its checksum is verified. Only the
    two members a backup has are read, as regular files: nothing in the archive names a path."""
    try:
        with tarfile.open(path, "r") as archive:
            members = {member.name: member for member in archive.getmembers() if member.isfile()}
            if MANIFEST_NAME not in members or DUMP_NAME not in members:
                raise BackupFailed(f"{path} is not a ragmux backup (it needs {MANIFEST_NAME} and {DUMP_NAME})")
            manifest = json.loads(archive.extractfile(members[MANIFEST_NAME]).read())
            dump = into / DUMP_NAME
            with archive.extractfile(members[DUMP_NAME]) as source, dump.open("wb") as copy:
                shutil.copyfileobj(source, copy)
    except (tarfile.TarError, OSError, ValueError) as exc:
        raise BackupFailed(f"cannot read {path}: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupFailed(f"{path} is not a backup this version reads (format {manifest.get('format')!r})")
    if _sha256(dump) != manifest.get("dump_sha256"):
        raise BackupFailed(f"{path} is damaged: its database dump does not match the manifest's checksum")
    return manifest, dump


def sealed_with_this_key(manifest: dict) -> bool:
    """Whether the encryption key this process runs with opens the backup's credentials."""
    from ragmux.core.crypto import DecryptionFailed, unseal
    from ragmux.core.encryption_key_check import KEY_CHECK_AAD

    check = manifest.get("encryption_key_check")
    if check is None:
        return True  # a database that never stored a credential
    try:
        unseal(base64.b64decode(check), aad=KEY_CHECK_AAD)
    except DecryptionFailed:
        return False
    return True


def _database_is_empty() -> bool:
    return "django_migrations" not in connection.introspection.table_names()


def backup_restore(*, path: Path, replace: bool) -> dict:
    """Restores a backup into this database: refused, before anything is written, when the
    backup is damaged, or when the database already holds a ragmux unless ``replace``. The
    restore is one transaction: it lands whole or not at all. A backup whose credentials need
    another encryption key is restored all the same: see `credentials_of_another_key_cleared`."""
    with tempfile.TemporaryDirectory(prefix=".ragmux-restore-") as work:
        manifest, dump = read_backup(path, Path(work))
        if not replace and not _database_is_empty():
            raise BackupFailed(
                "this database already holds a ragmux: restore into an empty database, or pass --replace "
                "to drop what it holds first"
            )
        pg_restore = find_pg_tool("pg_restore", max(server_major(), int(manifest.get("pg_dump_major") or 0)))
        arguments, env = _libpq_arguments()
        options = ["--no-owner", "--no-privileges", "--exit-on-error", "--single-transaction"]
        if replace:
            options += ["--clean", "--if-exists"]
        connection.close()  # our own session must not hold a lock the restore waits on
        _run([pg_restore.path, *options, *arguments, str(dump)], env, "pg_restore")
    return manifest
