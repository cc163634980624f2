"""``memscope check --bisect``: a check that fails against a baseline taken with
another JAX bisects the releases between the two for the functions that
failed, and names the first release that moved each; so a CI gate survives a
JAX upgrade by saying which release moved what, instead of only failing."""

from __future__ import annotations

from memscope.bisect.releases import Range, is_release, key
from memscope.bisect.run import Request, Result
from memscope.program.runner import Script
from memscope.render.bisect import answer, pass_line
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
    if script is None and now.run is not None and now.run.target:
        script = Script(now.run.target, tuple(now.run.argv), module=now.run.module)
    if script is None:
        return None, "--bisect: the report names no program to run on other releases"
    low, high = sorted((then, current), key=key)
    only = next(iter(failing)) if len(failing) == 1 else None
    # The XLA pass is memscope bisect's to tell: a CI gate waits only for the release.
    return Request(script, "jax", Range(low, high), function=only,
                   target_spec=target_spec, passes=False), None


def lines(result: Result, failing: set[str]) -> list[str]:
    """What ``check --bisect`` says: each move of a function that failed, with
    its pass; or that no release in the range moved them."""
    req = result.request
    out = []
    for e in result.explained:
        if e.name in failing:
            out.append(f"--bisect: {answer(e, req.package, req.min_change)}")
            said = pass_line(e, req.package)
            if said:
                out.append(f"  {said}")
    if not out:
        ran = [t.release for t in result.tried if t.status == "ran"]
        if not ran:
            return [f"--bisect: the program ran on no release of JAX in {req.range}"]
        names = ", ".join(sorted(failing))
        out.append(f"--bisect: no release of JAX from {ran[0]} to {ran[-1]} moved {names}'s "
                   f"figures by more than {req.min_change:.1%}: the change is the program's or "
                   "its other packages'")
    else:
        out.append(f"  (releases tried: {', '.join(t.release for t in result.tried)}; "
                   f"memscope bisect --jax {req.range} explains each move by the buffers at "
                   "its peak, and tells the XLA pass that made it where one did)")
    return out
