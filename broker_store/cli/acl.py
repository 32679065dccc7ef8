"""`python -m broker_store acl list|update|delete|whitelist`: ACL 1.0 accounts of the brokers (requests
50-54, ``client.acl_admin``), mqadmin's getAclConfig / updateAclConfig / deleteAclConfig /
updateGlobalWhiteAddr. Installed into the parser by ``broker_store.cli``.

Secrets never appear on the command line (where ``ps`` shows them) nor in the output: the caller's
account comes from ``cli.credentials`` (``--access-key``, ``--secret-key-file``), an account's new secret
from ``--account-secret-file`` or BROKER_STORE_ACL_ACCOUNT_SECRET. The requests go to the brokers named with
``-b`` or to every primary of ``-c`` (default: every primary the name server lists).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from broker_store.cli.credentials import add_credential_arguments, credentials_from_args, read_secret
from broker_store.cli.tls import tls_from_args
from broker_store.protocol.errors import ConfigError

ACCOUNT_SECRET_ENV = "BROKER_STORE_ACL_ACCOUNT_SECRET"

AdminParser = Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]


def _account(args: argparse.Namespace) -> Any:
    from broker_store.acl.account import PlainAccount
    from broker_store.validation import describe_validation_error

    def perms(text: str | None) -> list[str]:
        return [item.strip() for item in (text or "").split(",") if item.strip()]

    data = {
        "accessKey": args.account,
        "secretKey": read_secret(args.account_secret_file, ACCOUNT_SECRET_ENV, "the account's secret key"),
        "whiteRemoteAddress": args.white_address,
        "admin": args.admin,
        "defaultTopicPerm": args.default_topic_perm,
        "defaultGroupPerm": args.default_group_perm,
        "topicPerms": perms(args.topic_perms),
        "groupPerms": perms(args.group_perms),
    }
    try:
        return PlainAccount.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error("account", exc)) from exc


def _run(args: argparse.Namespace, action: Callable[[Any, str, str], Any]) -> int:
    """``action(acl_admin, broker_name, addr)`` on each target broker, in name order."""
    from broker_store.client import AsyncAdmin
    from broker_store.client.acl_admin import AsyncAclAdmin

    async def main() -> int:
        async with AsyncAdmin(args.namesrv, credentials=credentials_from_args(args), tls=tls_from_args(args)) as admin:
            if args.broker_addr:
                targets = {addr: addr for addr in args.broker_addr}
            else:
                targets = await admin.primary_addrs(args.cluster)
                if not targets:
                    raise ConfigError(f"no primary broker registered{' in ' + args.cluster if args.cluster else ''}")
            acl = AsyncAclAdmin(admin)
            for name, addr in sorted(targets.items()):
                await action(acl, name, addr)
        return 0

    return asyncio.run(main())


def cmd_acl_list(args: argparse.Namespace) -> int:
    async def show(acl: Any, name: str, addr: str) -> None:
        info = await acl.acl_info(addr)
        config = await acl.acl_config(addr)
        print(f"{name}\t{addr}\tversion {info.get('version', '?')}")
        print(f"  globalWhiteRemoteAddresses: {', '.join(config.global_white_addrs) or '-'}")
        for a in config.accounts:
            fields = [f"admin={str(a.admin).lower()}", f"whiteRemoteAddress={a.white_remote_address or '-'}",
                      f"defaultTopicPerm={a.default_topic_perm or 'DENY'}",
                      f"defaultGroupPerm={a.default_group_perm or 'DENY'}",
                      f"topicPerms={','.join(a.topic_perms) or '-'}", f"groupPerms={','.join(a.group_perms) or '-'}"]
            print("  " + "\t".join([a.access_key, *fields]))
    return _run(args, show)


def cmd_acl_update(args: argparse.Namespace) -> int:
    account = _account(args)

    async def update(acl: Any, name: str, addr: str) -> None:
        await acl.update_account(addr, account)
        print(f"updated account {account.access_key} on {name} ({addr})")
    return _run(args, update)


def cmd_acl_delete(args: argparse.Namespace) -> int:
    async def delete(acl: Any, name: str, addr: str) -> None:
        await acl.delete_account(addr, args.account)
        print(f"deleted account {args.account} on {name} ({addr})")
    return _run(args, delete)


def cmd_acl_whitelist(args: argparse.Namespace) -> int:
    patterns = [p.strip() for p in args.addresses.split(",") if p.strip()]

    async def whitelist(acl: Any, name: str, addr: str) -> None:
        await acl.update_global_white_addrs(addr, patterns)
        print(f"globalWhiteRemoteAddresses of {name} ({addr}): {', '.join(patterns) or '-'}")
    return _run(args, whitelist)


def add_acl_commands(admin_parser: AdminParser) -> None:
    """The ``acl`` command and its subcommands (``admin_parser`` adds the name-server option)."""
    acl = admin_parser("acl", lambda _a: 2, "ACL 1.0 accounts and whitelist of the brokers (list, update, delete, "
                                            "whitelist)")
    common = argparse.ArgumentParser(add_help=False)
    add_credential_arguments(common, "admin account")
    common.add_argument("-b", "--broker-addr", action="append", help="broker address (repeatable)")
    common.add_argument("-c", "--cluster", help="every primary of this cluster (default: every primary)")
    sub = acl.add_subparsers(dest="acl_command", required=True)
    sub.add_parser("list", parents=[common], help="accounts (no secrets) and global whitelist per broker") \
        .set_defaults(func=cmd_acl_list)
    p = sub.add_parser("update", parents=[common], help="create or update an account")
    p.add_argument("--account", required=True, help="the account's access key")
    p.add_argument("--account-secret-file", type=Path,
                   help=f"file holding the account's secret key (default: env {ACCOUNT_SECRET_ENV})")
    p.add_argument("--white-address", help="address pattern whose peers skip signature and permission checks")
    p.add_argument("--admin", action="store_true")
    p.add_argument("--default-topic-perm", help="DENY, PUB, SUB or PUB|SUB")
    p.add_argument("--default-group-perm", help="DENY, PUB, SUB or PUB|SUB")
    p.add_argument("--topic-perms", help="comma-separated topic=PERM")
    p.add_argument("--group-perms", help="comma-separated group=PERM")
    p.set_defaults(func=cmd_acl_update)
    p = sub.add_parser("delete", parents=[common], help="delete an account")
    p.add_argument("--account", required=True)
    p.set_defaults(func=cmd_acl_delete)
    p = sub.add_parser("whitelist", parents=[common], help="replace the global whitelist")
    p.add_argument("--addresses", required=True, help="comma-separated address patterns ('' clears it)")
    p.set_defaults(func=cmd_acl_whitelist)
