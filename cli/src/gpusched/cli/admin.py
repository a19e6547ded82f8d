"""``gpusched topics ensure`` and ``gpusched store migrate``: the one-shot set-up a
deployment runs before its services (docker compose's ``init``, the Kubernetes init Job).
Both are idempotent: what exists is left as it is."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from gpusched.contracts import KafkaSettings
from gpusched.contracts.provision import ensure_topics
from gpusched.store import Store, StoreSettings

__all__ = ["store_app", "topics_app"]

topics_app = typer.Typer(help="The event log's topics.", no_args_is_help=True)
store_app = typer.Typer(help="The store's schema.", no_args_is_help=True)
console = Console(stderr=True)


@topics_app.command("ensure")
def topics_ensure(
    replication_factor: Annotated[
        int, typer.Option(min=1, help="replicas of each new topic (3 on a 3-broker cluster)")
    ] = 1,
    min_insync: Annotated[
        int | None,
        typer.Option(min=1, help="min.insync.replicas of each new topic (2 with 3 replicas)"),
    ] = None,
    timeout: Annotated[float, typer.Option(help="seconds to wait for the broker")] = 60.0,
) -> None:
    """Create every declared topic and its dead-letter topic under GPUSCHED_TOPIC_PREFIX
    where missing, on the broker of GPUSCHED_KAFKA_* (KAFKA_BOOTSTRAP_SERVERS)."""
    settings = KafkaSettings()
    try:
        created = ensure_topics(
            settings, settings.topic_prefix, timeout, None, replication_factor, min_insync
        )
    except Exception as exc:  # ours (bad options) or aiokafka's: refused, or no answer
        why = str(exc) or repr(exc)
        console.print(f"[red]error:[/] topics on {settings.kafka_bootstrap_servers}: {why}")
        raise typer.Exit(1) from exc
    console.print(f"{len(created)} topics created" + (f": {', '.join(created)}" if created else ""))


@store_app.command("migrate")
def store_migrate() -> None:
    """Create the database of GPUSCHED_STORE_DATABASE where missing and apply the pending
    schema migrations (GPUSCHED_STORE_DSN; shipped inside the gpusched.store package)."""
    settings = StoreSettings()
    try:
        applied = Store.open(settings).applied
    except Exception as exc:  # ours (MigrationError) or clickhouse-connect's: not there
        console.print(f"[red]error:[/] the store at {settings.shown_dsn}: {exc}")
        raise typer.Exit(1) from exc
    console.print(
        f"{len(applied)} migrations applied" + (f": {applied}" if applied else " (up to date)")
    )
