"""What the server's tests and the cross-package tests share: reading a value back from the
`/metrics` exposition text as a Prometheus scraper would."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def sample(text: str, name: str, **labels: str) -> float:
    """The value of the sample `name` whose labels include `labels` in an exposition text."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise AssertionError(f"{name} {labels} not in /metrics")
