"""``memscope fit --plan``'s records: which memory trade buys the largest batch.

One :class:`PlanRow` per setting (the program as written, the advised donation,
each checkpoint policy, the policies made from the program's own names, the
offloading policies, the best policy with the advised donation), each with the
largest batch that fits the budget, found by compiling as ``fit`` finds it, or
why it has none. Facts only; ordering and choosing are the planner's
(:mod:`memscope.variants.plan`), drawing is :mod:`memscope.render.plan`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: What a setting changes: nothing, the donation, the checkpoint policy (a
#: standard one, one made from the program's names, one that offloads), or the
#: best policy together with the advised donation.
SettingKind = Literal["written", "donation", "policy", "names", "offload", "combined"]
SETTING_KINDS: tuple[SettingKind, ...] = ("written", "donation", "policy", "names", "offload",
                                          "combined")


@dataclass(frozen=True)
class PlanPoint:
    """The step compiled with one setting at one batch size. ``None``: not known
    (the compile gave no figure, or the target counts no FLOPs)."""

    batch: int
    peak_bytes: int | None
    #: host memory the program holds (where an offloading policy puts residuals)
    host_bytes: int | None = None
    flops: float | None = None
    #: the target's compiler refused the size as too large for the device (its
    #: words); the size does not fit, and has no figures
    refused: str | None = None
    #: what the compiler said such a program needs at least (``None``: unsaid)
    needs_bytes: int | None = None
    #: how far over the device the compiler said it is at least (``None``: unsaid)
    excess_bytes: int | None = None


@dataclass(frozen=True)
class PlanRow:
    """One setting: the largest batch whose peak fits the budget, confirmed by
    compiling it (fits) and ``largest + step`` (does not), or why there is none.

    ``below`` is set where the search stopped early: that size, which another
    setting fits, was compiled and does not fit, so this setting cannot fit as
    many (its exact batch was not searched). ``note`` says why a row has no
    batch (the function differentiates nothing, the compile failed, the target
    compiles no host offload, ...).
    """

    setting: str
    kind: SettingKind
    #: the change in the user's terms (``None`` for the program as written)
    code: str | None
    largest: int | None
    #: the peak at ``largest`` and at ``largest + step`` (memscope's peak rule)
    peak_bytes: int | None = None
    over_bytes: int | None = None
    #: host memory held at ``largest`` (what an offload keeps on the host)
    host_bytes: int | None = None
    #: XLA's FLOPs of the step at ``largest``, per example
    flops_per_example: float | None = None
    #: the step's FLOPs at the captured batch against the program as written
    #: there (1.0: no extra compute), where both are known
    flops_ratio: float | None = None
    below: int | None = None
    note: str | None = None
    compiles: int = 0
    #: every size compiled for this setting, by batch
    points: tuple[PlanPoint, ...] = ()


@dataclass(frozen=True)
class FitPlan:
    """``memscope fit --plan``: for one function, each setting's largest batch:
    the rows with a batch best first (the largest batch; of equal batches the
    fewest FLOPs, then the smaller change), the winner first; then the rows
    stopped early, each fitting fewer than the batch it names (where they fall
    among the rows with a batch, but below the winner, is not searched); then
    the rows that say why they have none.

    ``winner`` is the first row when it has a batch (else ``None``: nothing
    fits). ``flops_rule`` says what counted the FLOPs where it is not XLA's
    cost analysis of each compiled step (a GPU target's deviceless compile);
    ``compiles`` and ``seconds`` are the plan's whole cost, ``cached`` the
    compiles read from memscope's cache instead.
    """

    function: str
    source: str | None
    argument: str
    axis: int
    batch: int
    step: int
    budget_bytes: int | None
    rows: tuple[PlanRow, ...]
    winner: str | None
    winner_code: str | None
    compiles: int
    seconds: float
    cached: int = 0
    target: str | None = None
    flops_rule: str | None = None
    choice_note: str | None = None
    memory_bytes: int | None = None
    held_bytes: int | None = None
    held_note: str | None = None
    #: which rule gave ``memory_bytes`` where the target's room did (no ``--memory``)
    memory_source: str | None = None
    #: how some of the target's compiles were made otherwise than the rest
    compile_note: str | None = None
    #: where the step's FLOPs do not grow with the batch resized: the function
    #: may use only part of it (MaxText slices its data to the configured batch)
    batch_note: str | None = None
