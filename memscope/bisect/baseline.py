"""``memscope check --bisect``: a check that fails against a baseline taken with
another JAX bisects the releases between the two for the functions that
failed, and names the first release that moved each; so a CI gate survives a
JAX upgrade by saying which release moved what, instead of only failing."""

from __future__ import annotations

from memscope.bisect.releases import Range, is_release, key
from memscope.bisect.run import Request
from memscope.program.runner import Script
from memscope.report import Report


def request(base: Report, now: Report, failing: set[str], script: Script | None,
            target_spec: str | None) -> tuple[Request | None, str | None]:
    """The bisect to run, or why there is none (one line)."""
    then, current = base.environment.jax, now.environment.jax
    if then == current:
        return None, (f"--bisect: the baseline was taken with this JAX ({current}): no release "
                      "to bisect; the change is the program's or its other packages'")
    if not (is_release(then) and is_release(current)):
        return None, f"--bisect: JAX {then} -> {current}: not two releases of the package index"
    if script is None and now.run is not None and now.run.program:
        script = Script(now.run.program, tuple(now.run.argv), module=now.run.module)
    if script is None:
        return None, "--bisect: the report names no program to run on other releases"
    low, high = sorted((then, current), key=key)
    only = next(iter(failing)) if len(failing) == 1 else None
    # The XLA pass is memscope bisect's to tell: a CI gate waits only for the release.
    return Request(script, "jax", Range(low, high), function=only,
                   target_spec=target_spec, passes=False), None
