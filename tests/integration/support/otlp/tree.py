"""Draws the traces a receiver recorded (tests/integration/support/otlp/recorder.py's JSONL) as indented trees.

    python3 tests/integration/support/otlp/tree.py received.jsonl [SERVICE]

One block per trace: each span with its offset from the trace's first span, its duration, and
the rebuno attributes that say what happened (attempt, outcome, stop, replayed); links last.
"""

import json
import sys
from collections import defaultdict


def attributes(span):
    out = {}
    for item in span.get("attributes", []):
        value = item["value"]
        out[item["key"]] = next(iter(value.values())) if value else None
    return out


def label(span, start):
    attrs = attributes(span)
    offset = (int(span["startTimeUnixNano"]) - start) / 1e6
    took = (int(span["endTimeUnixNano"]) - int(span["startTimeUnixNano"])) / 1e6
    notes = [
        f"{key.removeprefix('rebuno.')}={attrs[key]}"
        for key in ("rebuno.attempt", "rebuno.outcome", "rebuno.stop", "rebuno.replayed")
        if key in attrs
    ]
    links = [f"link {link['traceId'][:8]}…/{link['spanId']}" for link in span.get("links", [])]
    return f"{span['name']}  [{span['spanId']}] +{offset:.0f} ms, {took:.1f} ms  {' '.join(notes + links)}"


def service_of(resource):
    for item in resource.get("resource", {}).get("attributes", []):
        if item["key"] == "service.name":
            return item["value"].get("stringValue")
    return None


def main(path, service=None):
    spans = []
    for line in open(path, encoding="utf-8"):
        entry = json.loads(line)
        if entry.get("signal") != "traces" or "body" not in entry:
            continue
        for resource in entry["body"].get("resourceSpans", []):
            if service is not None and service_of(resource) != service:
                continue
            for scope in resource.get("scopeSpans", []):
                spans.extend(scope.get("spans", []))
    by_trace = defaultdict(list)
    for span in spans:
        by_trace[span["traceId"]].append(span)
    for trace, members in by_trace.items():
        members.sort(key=lambda s: int(s["startTimeUnixNano"]))
        start = int(members[0]["startTimeUnixNano"])
        ids = {s["spanId"] for s in members}
        children = defaultdict(list)
        for span in members:
            parent = span.get("parentSpanId")
            children[parent if parent in ids else None].append(span)
        print(f"trace {trace}")

        def draw(span, depth):
            print("  " * (depth + 1) + label(span, start))
            for child in children[span["spanId"]]:
                draw(child, depth + 1)

        for root in children[None]:
            draw(root, 0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
