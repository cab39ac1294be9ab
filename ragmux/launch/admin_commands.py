"""The `ragmux` subcommands that look after an installation: its schema, its users, its
encryption key and its backups."""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from ragmux.launch.environment import environment, migrate, ragmux_version, refuse_a_bad_start


def cmd_migrate(args: argparse.Namespace) -> int:
    with environment():
        migrate(verbosity=1)
        refuse_a_bad_start()
    return 0


def cmd_createadmin(args: argparse.Namespace) -> int:
    with environment():
        from ragmux.core.accounts import UserExists, user_create
        from ragmux.core.errors import InvalidInput

        migrate()
        password = sys.stdin.readline().rstrip("\n") if args.password_stdin else None
        try:
            user, generated = user_create(username=args.username, password=password, role=args.role)
        except UserExists as exc:
            sys.stderr.write(f"ragmux: {exc}\n")
            return 1
        except InvalidInput as exc:
            sys.stderr.write(f"ragmux: password refused: {exc.message}\n")
            return 1
        print(f"created {args.role} {user.username!r}")
        if generated:
            print(f"password (shown once): {generated}")
    return 0


def cmd_rotate_key(args: argparse.Namespace) -> int:
    from ragmux.core.crypto import generate_key
    from ragmux.launch.embedded import load_or_create_secrets, write_secrets

    new_key_text = args.new or generate_key()
    with environment() as services:
        from ragmux.launch.encryption_key_rotation import EncryptionKeyRotationFailed, rotate_encryption_key
        from ragmux.settings import decode_encryption_key

        migrate()
        refuse_a_bad_start()
        try:
            count = rotate_encryption_key(new_key=decode_encryption_key(new_key_text))
        except EncryptionKeyRotationFailed as exc:
            sys.stderr.write(f"ragmux: key rotation failed, nothing was changed: {exc}\n")
            return 1
        print(f"re-encrypted {count} credential(s) with the new key")
        if services.secrets_from_file:
            values = load_or_create_secrets(services.data_dir)
            values["RAGMUX_ENCRYPTION_KEY"] = new_key_text
            write_secrets(services.data_dir, values)
            print(f"the new key is saved in {services.data_dir / 'secrets.env'}; restart ragmux to use it")
        else:
            print("install this key as RAGMUX_ENCRYPTION_KEY and restart every ragmux process:")
            print(new_key_text)
    return 0


def cmd_reset_password(args: argparse.Namespace) -> int:
    with environment():
        from django.contrib.auth.models import User

        from ragmux.core.accounts import user_reset_password
        from ragmux.core.errors import InvalidInput
        from ragmux.core.signin import forget_failures

        migrate()
        user = User.objects.filter(username__iexact=args.username).first()
        if user is None:
            sys.stderr.write(f"ragmux: no user {args.username!r}\n")
            return 1
        password = None
        if not args.generate:
            password = (getpass.getpass("new password: ") if sys.stdin.isatty() else sys.stdin.readline()).rstrip("\n")
            if not password:
                sys.stderr.write("ragmux: no password given (type one, pipe one in, or pass --generate)\n")
                return 1
        try:
            generated = user_reset_password(user=user, password=password)
        except InvalidInput as exc:
            sys.stderr.write(f"ragmux: password refused: {exc.message}\n")
            return 1
        forget_failures(username=user.username)
        print(f"password reset for {user.username!r}: their sessions ended and their failed sign-ins were forgotten")
        if generated:
            print(f"password (shown once): {generated}")
        if not user.is_active:
            print(f"note: {user.username!r} is deactivated and still cannot sign in")
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    with environment():
        from ragmux.launch.backup import BackupFailed, backup_create

        target = Path(args.output)
        if not target.is_dir() and not target.parent.is_dir():
            sys.stderr.write(f"ragmux: {target.parent} is not a folder\n")
            return 1
        try:
            path, manifest = backup_create(target=target, version=ragmux_version())
        except BackupFailed as exc:
            sys.stderr.write(f"ragmux: backup failed, nothing was written: {exc}\n")
            return 1
        counts = ", ".join(f"{count} {label}" for label, count in manifest["counts"].items())
        print(f"backup written to {path} ({manifest['dump_bytes']} bytes of database: {counts})")
        print("the encryption key is not in it: keep RAGMUX_ENCRYPTION_KEY (or the data folder's secrets.env) apart")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    with environment():
        from ragmux.launch.backup import BackupFailed, backup_restore, sealed_with_this_key
        from ragmux.launch.encryption_key_rotation import credentials_of_another_key_cleared

        try:
            manifest = backup_restore(path=Path(args.file), replace=args.replace)
        except BackupFailed as exc:
            sys.stderr.write(f"ragmux: restore refused or failed, the database is as it was: {exc}\n")
            return 1
        migrate()  # a backup made by an older version is brought up to this one
        cleared = [] if sealed_with_this_key(manifest) else credentials_of_another_key_cleared()
        refuse_a_bad_start()
        counts = ", ".join(f"{count} {label}" for label, count in manifest["counts"].items())
        print(f"restored the backup of {manifest['created_at']} ({counts})")
        if cleared:
            print(
                f"the backup's API keys were sealed with another encryption key: {len(cleared)} connection(s) "
                f"need theirs entered again ({', '.join(cleared)}); everything else is restored"
            )
    return 0


def add_parsers(sub) -> None:
    """The subcommands above, on the `ragmux` command's parser."""
    sub.add_parser("migrate", help="apply database migrations").set_defaults(func=cmd_migrate)

    create = sub.add_parser("createadmin", help="create a user (an admin unless --role says otherwise)")
    create.add_argument("--username", required=True)
    create.add_argument("--role", choices=("admin", "editor", "viewer"), default="admin")
    create.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    create.set_defaults(func=cmd_createadmin)

    rotate = sub.add_parser("rotate-key", help="re-encrypt every stored credential with a new key")
    rotate.add_argument(
        "--new",
        metavar="KEY",
        help="the new key (32 bytes, base64url), written --new=KEY since a key may start with '-'; "
        "generated when omitted",
    )
    rotate.set_defaults(func=cmd_rotate_key)

    reset = sub.add_parser("reset-password", help="set a user's password and lift their sign-in lockout")
    reset.add_argument("username")
    reset.add_argument("--generate", action="store_true", help="generate the password and print it once")
    reset.set_defaults(func=cmd_reset_password)

    backup = sub.add_parser("backup", help="write a backup of the database (pg_dump) and its manifest")
    backup.add_argument(
        "--output", default=".", help="a folder (a dated file is made in it) or the file to write (default: .)"
    )
    backup.set_defaults(func=cmd_backup)

    restore = sub.add_parser("restore", help="restore a backup into an empty database")
    restore.add_argument("file", help="the backup file")
    restore.add_argument("--replace", action="store_true", help="drop what the database holds first")
    restore.set_defaults(func=cmd_restore)
