#!/usr/bin/env python3
"""Scrapes a Prometheus endpoint and parses it with prometheus_client's text parser
(Debian's python3-prometheus-client), which refuses what does not follow the text format.

    scrape_metrics.py HOST:PORT

Prints one JSON object: each sample as "name{label="value",...}" (labels sorted) to its
value, and "#types" mapping each family to its type. Exit 1 when the scrape or the parse fails.
"""
import json
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def main():
    url = "http://" + sys.argv[1] + "/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        if reply.status != 200:
            raise SystemExit("scrape: HTTP %d" % reply.status)
        kind = reply.headers.get("Content-Type", "")
        if not kind.startswith("text/plain; version=0.0.4"):
            raise SystemExit("scrape: Content-Type %r" % kind)
        text = reply.read().decode("utf-8")
    samples = {}
    types = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            labels = ",".join('%s="%s"' % (k, v) for k, v in sorted(sample.labels.items()))
            samples[sample.name + ("{" + labels + "}" if labels else "")] = sample.value
    samples["#types"] = types
    print(json.dumps(samples, sort_keys=True))


if __name__ == "__main__":
    main()
