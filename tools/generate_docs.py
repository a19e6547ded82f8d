"""Regenerates the documents derived from code: the AsyncAPI file and the settings table.

python tools/generate_docs.py asyncapi   # docs/asyncapi.json
python tools/generate_docs.py settings   # the table between markers in README.md
python tools/generate_docs.py params     # the parameter table in docs/scheduling.md
python tools/generate_docs.py k8s-topics # k8s/overlays/distributed/topics.yaml (KafkaTopics)
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml
from pydantic_settings import BaseSettings

from gpusched.api import ApiSettings
from gpusched.collector import CollectorSettings
from gpusched.contracts.asyncapi import asyncapi_json
from gpusched.contracts.provision import topic_specs
from gpusched.contracts.settings import LogSettings
from gpusched.core import Params
from gpusched.dispatcher import DispatcherSettings
from gpusched.forecaster import ForecasterSettings
from gpusched.processor import ProcessorSettings
from gpusched.simcluster import SimClusterSettings
from gpusched.sink import SinkSettings
from gpusched.store import StoreSettings

REPO = Path(__file__).resolve().parents[1]
BEGIN = "<!-- settings-table:begin (make settings-doc) -->"
END = "<!-- settings-table:end -->"
PARAMS_BEGIN = "<!-- params-table:begin (make settings-doc) -->"
PARAMS_END = "<!-- params-table:end -->"

SETTINGS: tuple[tuple[str, type[BaseSettings]], ...] = (
    ("every service", LogSettings),
    ("store (sink, api)", StoreSettings),
    ("collector", CollectorSettings),
    ("processor", ProcessorSettings),
    ("forecaster", ForecasterSettings),
    ("dispatcher", DispatcherSettings),
    ("simcluster", SimClusterSettings),
    ("sink", SinkSettings),
    ("api", ApiSettings),
)


def _env(cls: type[BaseSettings], name: str) -> str:
    """The environment variable that sets field ``name`` of ``cls``."""
    return f"{cls.model_config.get('env_prefix', '')}{name}".upper()


def setting_names() -> set[str]:
    """Every environment variable that some gpusched setting reads."""
    return {_env(cls, name) for _, cls in SETTINGS for name in cls.model_fields}


def settings_table() -> str:
    """A markdown table: every setting's environment name, default and meaning."""
    lines = ["| variable | used by | default | meaning |", "|---|---|---|---|"]
    seen: dict[str, list[str]] = {}
    rows: dict[str, tuple[str, str]] = {}
    for owner, cls in SETTINGS:
        for name, field in cls.model_fields.items():
            env = _env(cls, name)
            default = "(derived)" if field.default_factory is not None else repr(field.default)
            seen.setdefault(env, []).append(owner)
            rows[env] = (default, field.description or "")
    for env, owners in seen.items():
        default, meaning = rows[env]
        lines.append(f"| `{env}` | {', '.join(owners)} | `{default}` | {meaning} |")
    return "\n".join(lines)


def params_table() -> str:
    """A markdown table: every scheduling parameter's name, default, unit, bounds,
    whether only an admin may change it, and meaning."""
    lines = [
        "| parameter | default | unit | bounds | admin only | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for name, spec in Params.specs().items():
        bounds = "" if spec.lo is None else f"{spec.lo:g} .. {spec.hi:g}"
        admin = "yes" if spec.dangerous else ""
        lines.append(
            f"| `{name}` | `{spec.default!r}` | {spec.unit} | {bounds} | {admin} | {spec.doc} |"
        )
    return "\n".join(lines)


KAFKA_TOPICS = REPO / "k8s" / "overlays" / "distributed" / "topics.yaml"
TOPIC_REPLICAS, TOPIC_MIN_ISR = 3, 2


def kafka_topics() -> str:
    """One Strimzi KafkaTopic per declared topic and dead-letter topic (topics.yaml of
    gpusched.contracts), with 3 replicas and min.insync.replicas 2."""
    docs = [
        {
            "apiVersion": "kafka.strimzi.io/v1",
            "kind": "KafkaTopic",
            "metadata": {"name": spec.name, "labels": {"strimzi.io/cluster": "gpusched"}},
            "spec": {
                "topicName": spec.name,
                "partitions": spec.partitions,
                "replicas": TOPIC_REPLICAS,
                "config": {**spec.configs(), "min.insync.replicas": str(TOPIC_MIN_ISR)},
            },
        }
        for spec in topic_specs()
    ]
    header = "# Generated from gpusched.contracts' topics.yaml: make settings-doc\n"
    return header + yaml.safe_dump_all(docs, sort_keys=False)


def _between(text: str, begin: str, end: str, table: str) -> str:
    before, found, rest = text.partition(begin)
    if not found:
        raise SystemExit(f"marker {begin!r} not found")
    _, _, after = rest.partition(end)
    return f"{before}{begin}\n{table}\n{end}{after}"


def readme_with_table(readme: str) -> str:
    return _between(readme, BEGIN, END, settings_table())


def scheduling_with_params(doc: str) -> str:
    return _between(doc, PARAMS_BEGIN, PARAMS_END, params_table())


def main(what: str) -> int:
    if what == "asyncapi":
        (REPO / "docs" / "asyncapi.json").write_text(asyncapi_json())
    elif what == "settings":
        readme = REPO / "README.md"
        readme.write_text(readme_with_table(readme.read_text()))
    elif what == "params":
        doc = REPO / "docs" / "scheduling.md"
        doc.write_text(scheduling_with_params(doc.read_text()))
    elif what == "k8s-topics":
        KAFKA_TOPICS.write_text(kafka_topics())
    else:
        print(
            f"unknown document {what!r}; choose asyncapi, settings, params or k8s-topics",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ""))
