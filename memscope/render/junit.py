"""A check as JUnit XML: one test case per function, for CI test-report viewers."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import IO

from memscope.check.records import CheckResult, FunctionVerdict
from memscope.render._check_text import environment_text, function_label
from memscope.render.text import visible

_SKIPPED = {"new": "new: not in the baseline", "vanished": "vanished: in the baseline only",
            "unchecked": "unchecked: no baseline and no budget"}


def render_check_junit(result: CheckResult, file: IO[str]) -> None:
    """Write ``<testsuites>`` with one ``<testcase>`` per function (and one for the
    environment, and one failing when nothing was compared with the baseline)."""
    cases = [_case(fn) for fn in result.functions]
    if result.environment:
        env = ET.Element("testcase", classname="memscope.environment", name="environment")
        text = visible("the environment differs from the baseline's: "
                       + environment_text(result.environment))
        if result.environment_failed:
            ET.SubElement(env, "failure", message=text, type="environment").text = text
        else:
            ET.SubElement(env, "system-out").text = text
        cases.append(env)
    if result.empty_failed:
        empty = ET.Element("testcase", classname="memscope.baseline", name="baseline")
        text = visible(str(result.nothing_compared))
        ET.SubElement(empty, "failure", message=text, type="nothing_compared").text = text
        cases.append(empty)
    failures = sum(1 for c in cases if c.find("failure") is not None)
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
    counts = {"tests": str(len(cases)), "failures": str(failures), "errors": "0",
              "skipped": str(skipped)}
    root = ET.Element("testsuites", counts)
    suite = ET.SubElement(root, "testsuite", {"name": "memscope check", **counts})
    suite.extend(cases)
    ET.indent(root)
    file.write('<?xml version="1.0" encoding="utf-8"?>\n')
    file.write(ET.tostring(root, encoding="unicode"))
    file.write("\n")


def _case(fn: FunctionVerdict) -> ET.Element:
    # XML 1.0 cannot hold control characters at all: visible() writes them as escapes.
    name = visible(function_label(fn))
    attrs = {"classname": f"memscope.{visible(fn.name)}", "name": name}
    if fn.file is not None:
        attrs["file"] = visible(fn.file)
    if fn.line is not None:
        attrs["line"] = str(fn.line)
    case = ET.Element("testcase", attrs)
    if fn.failed:
        failure = ET.SubElement(case, "failure", message=visible(fn.problems[0]),
                                type=fn.status)
        failure.text = "\n".join(visible(p) for p in fn.problems)
    elif fn.status in _SKIPPED:
        ET.SubElement(case, "skipped", message=_SKIPPED[fn.status])
    if fn.notes:
        ET.SubElement(case, "system-out").text = "\n".join(visible(n) for n in fn.notes)
    return case
