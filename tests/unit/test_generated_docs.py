"""Derived documents stay in step with the code."""

from __future__ import annotations

from pathlib import Path

from tools.generate_docs import (
    KAFKA_TOPICS,
    kafka_topics,
    readme_with_table,
    scheduling_with_params,
)

REPO = Path(__file__).resolve().parents[2]


def test_readme_settings_table_is_current() -> None:
    readme = (REPO / "README.md").read_text()
    assert readme == readme_with_table(readme), "README settings table is stale: make settings-doc"


def test_scheduling_doc_parameter_table_matches_the_code() -> None:
    doc = (REPO / "docs" / "scheduling.md").read_text()
    assert doc == scheduling_with_params(doc), "docs/scheduling.md is stale: make settings-doc"


def test_kafka_topics_match_the_topic_declarations() -> None:
    assert KAFKA_TOPICS.read_text() == kafka_topics(), "stale KafkaTopics: make settings-doc"
