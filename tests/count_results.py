#!/usr/bin/env python3
"""Counts test cases from bazel-testlogs/<target>/test.xml for the given Bazel test targets.

Prints "PASSED FAILED SKIPPED". A target without a result file (it did not build, or did not run)
counts as one failure, so nothing that broke is ever counted as passing.
"""
import os
import sys
import xml.etree.ElementTree as ET


def count(target):
    package, _, name = target.lstrip("/").partition(":")
    path = os.path.join("bazel-testlogs", package, name, "test.xml")
    if not os.path.exists(path):
        return 0, 1, 0
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        return 0, 1, 0
    passed = failed = skipped = 0
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.get("result") == "skipped" or case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    if passed == 0 and failed == 0 and skipped == 0:
        # A shell test or a crash: Bazel's own summary has one testcase or none at all.
        failed = 1 if root.find(".//failure") is not None or root.find(".//error") is not None else 0
        passed = 1 - failed
    return passed, failed, skipped


def main():
    passed = failed = skipped = 0
    for target in sys.argv[1:]:
        p, f, s = count(target)
        passed += p
        failed += f
        skipped += s
    print(passed, failed, skipped)


if __name__ == "__main__":
    main()
