"""Parse a Prometheus scrape with the Prometheus project's own Python parsers.

Usage: prom_parse.py FILE

Reads the exposition text in FILE, parses it with both parsers of
`prometheus_client` (the text format 0.0.4 parser Prometheus falls back to,
and the strict OpenMetrics parser, which rejects anything the standard does
not allow), and prints one JSON object: {"samples": [[name, labels, value],
...], "families": {name: type}} from the OpenMetrics parse. Exits non-zero
with the parser's message if either parse fails.
"""

import json
import sys

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families as text_families


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as handle:
        text = handle.read()
    # The 0.0.4 parser: every family must parse.
    classic = list(text_families(text))
    if not classic:
        print("the 0.0.4 parser found no family", file=sys.stderr)
        return 1
    samples = []
    families = {}
    for family in openmetrics_families(text):
        families[family.name] = family.type
        for sample in family.samples:
            samples.append([sample.name, sample.labels, sample.value])
    json.dump({"samples": samples, "families": families}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
