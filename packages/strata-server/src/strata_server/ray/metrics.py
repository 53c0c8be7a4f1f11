"""`/metrics` of a replicated server: every replica's series, labelled `replica="<id>"`.

Each replica renders the single server's exposition text (`Metrics.render`); the ingress
merges them so every metric family keeps one `# HELP`/`# TYPE` header followed by the
samples of all replicas (the text format wants a family's samples together). Prometheus
sums across replicas with `sum without (replica)`; a replaced replica's series go away with
it, as a restarted process's do.

No Ray import: this module is tested without Ray.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

METRIC_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def labelled(sample: str, replica: str) -> str:
    """One sample line with `replica="..."` as its first label."""
    match = METRIC_NAME.match(sample)
    name_end = match.end() if match else 0
    name, rest = sample[:name_end], sample[name_end:]
    label = f'replica="{replica}"'
    if rest.startswith("{}"):
        return f"{name}{{{label}}}{rest[2:]}"
    if rest.startswith("{"):
        return f"{name}{{{label},{rest[1:]}"
    return f"{name}{{{label}}}{rest}"


def _families(text: str) -> list[tuple[str, list[str], list[str]]]:
    """(name, header lines, sample lines) per family, in the order the text has them."""
    families: list[tuple[str, list[str], list[str]]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            name = parts[2] if len(parts) > 2 else ""
            if not families or families[-1][0] != name or families[-1][2]:
                families.append((name, [], []))
            families[-1][1].append(line)
        else:
            if not families:
                families.append(("", [], []))
            families[-1][2].append(line)
    return families


def merge_replica_metrics(texts: Mapping[str, str], own: Iterable[str] = ()) -> str:
    """The replicas' exposition texts (replica id -> text) as one text, plus `own` lines
    (the ingress's series, already formatted) first."""
    order: list[str] = []
    headers: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    for replica, text in sorted(texts.items()):
        for name, header, lines in _families(text):
            if name not in headers:
                order.append(name)
                headers[name] = header
                samples[name] = []
            samples[name].extend(labelled(line, replica) for line in lines)
    out = list(own)
    for name in order:
        out.extend(headers[name])
        out.extend(samples[name])
    return "\n".join(out) + "\n"
