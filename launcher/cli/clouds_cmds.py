"""`launcher clouds ...`: what launcher keeps on a cloud outside any cluster."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from launcher.cli.app import app, print_json

clouds_app = typer.Typer(
    name="clouds",
    help="What launcher keeps on a cloud outside any cluster.",
    no_args_is_help=True,
)
app.add_typer(clouds_app, name="clouds")


def _where(region: str | None) -> str:
    return region or "all regions"


@clouds_app.command("cleanup")
def cleanup_cmd(
    cloud: Annotated[str, typer.Argument(help="The cloud: aws, gcp, lambda, vast, ...")],
    region: Annotated[str | None, typer.Option("--region", "-r", help="Only this region.")] = None,
    yes: Annotated[bool, typer.Option("-y", "--yes", help="Do not ask for confirmation.")] = False,
    dryrun: Annotated[bool, typer.Option("--dryrun", help="List what would be deleted; delete nothing.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable report.")] = False,
) -> int:
    """Delete what launcher created once and shares between clusters, which `down` never
    deletes: an AWS region's key pair and shared security group, a GCP network's
    firewall rules, the SSH key launcher registered on a Lambda or Vast account. Lists
    each one first; keeps (and says why) what an instance or a cluster still uses."""
    from launcher.api.cleanup import DELETED, FAILED, KEPT, CleanupItem, cleanup_leftovers
    from launcher.errors import LauncherError

    def confirm(items: list[CleanupItem]) -> bool:
        if yes:
            return True
        for item in items:
            sys.stderr.write(f"  {_where(item.region)}  {item.kind}  {item.name}\n")
        if not sys.stdin.isatty():
            raise LauncherError(f"clouds cleanup {cloud}: this deletes {len(items)} "
                                "resource(s) listed above; pass -y to confirm (stdin is not "
                                "a terminal), or --dryrun to only list them.")
        return typer.confirm(f"Delete these {len(items)} resource(s) of {cloud}?",
                             default=False, err=True)

    report = cleanup_leftovers(cloud, region, dryrun=dryrun, confirm=confirm)
    if json_out:
        print_json(report.to_json())
        return 1 if any(i.action == FAILED for i in report.items) else 0
    if report.note:
        sys.stdout.write(report.note[:1].upper() + report.note[1:] + "\n")
    for item in report.items:
        line = f"{item.action}: {item.kind} {item.name} in {_where(item.region)}"
        if item.action in (KEPT, FAILED):
            line += f" ({item.reason})"
        sys.stdout.write(line + "\n")
    if dryrun and any(i.action != KEPT for i in report.items):
        sys.stdout.write(f"(--dryrun: nothing deleted; `launcher clouds cleanup {cloud}"
                         f"{' --region ' + region if region else ''}` deletes them)\n")
    deleted = sum(i.action == DELETED for i in report.items)
    if deleted:
        sys.stdout.write(f"Deleted {deleted} resource(s); a later launch creates what it "
                         "needs again.\n")
    return 1 if any(i.action == FAILED for i in report.items) else 0
