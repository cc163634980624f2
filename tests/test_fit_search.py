"""The search of ``memscope fit`` on peaks given as functions of the batch.

The compile is replaced by a function of the batch so that the search itself
is checked on shapes of cost real programs show: linear, padded to a multiple
(a step), and an algorithm change past a size. Each answer is checked against
the brute-force answer over every size.
"""

from __future__ import annotations

import pytest

from memscope.variants.fit import MAX_COMPILES, BatchChoice, OverCapacity, search


def _choice(size: int, step: int = 1) -> BatchChoice:
    return BatchChoice(arguments=(), axes=(), size=size, step=step, inferred=True, note="")


def _truth(peak, budget: int, step: int) -> int:
    batch = 0
    while peak(batch + step) <= budget:
        batch += step
    return batch


COSTS = {
    "linear": lambda b: 1000 + 37 * b,
    "padded to 64": lambda b: 1000 + 37 * (-(-b // 64) * 64),
    "algorithm change past 300": lambda b: 1000 + 37 * b + (5000 if b > 300 else 0),
    "quadratic": lambda b: 1000 + 3 * b * b,
    # XLA:TPU pads to tiles, and a layout change past a size adds a jump
    "tiles of 64, a jump past 400": lambda b: 1000 + 37 * (-(-b // 64) * 64)
                                               + (900 if b > 400 else 0),
}


@pytest.mark.parametrize("name", COSTS)
@pytest.mark.parametrize("step", [1, 8])
def test_the_answer_fits_and_the_next_size_up_does_not(name, step):
    peak, budget = COSTS[name], 20_000
    calls = []

    def compile_peak(call, choice, batch, donated):
        calls.append(batch)
        return peak(batch)

    answer = search(None, _choice(16, step), budget, compile_peak=compile_peak)
    assert answer.largest == _truth(peak, budget, step)
    assert answer.largest in calls and answer.largest + step in calls  # both compiled
    # A staircase closes in from both sides: the search ends before its limit.
    assert len(calls) == len(set(calls)) == answer.compiles < MAX_COMPILES
    assert answer.linear == (name == "linear")
    if name == "linear":
        assert answer.compiles == 4 and answer.note is None  # 16, 32, the answer, one up
        assert (answer.fixed, answer.per_example) == (1000, 37)
    else:
        assert "not linear" in answer.note


def test_a_known_peak_costs_no_compile_and_nothing_fitting_says_so():
    calls = []

    def compile_peak(call, choice, batch, donated):
        calls.append(batch)
        return 1000 + 37 * batch

    answer = search(None, _choice(16), 100, known=1000 + 37 * 16, compile_peak=compile_peak)
    assert 16 not in calls and answer.largest is None


def test_a_peak_flat_under_the_budget_is_bracketed_by_the_line_not_by_doubling():
    """XLA:TPU's peaks as `fit --target` met them: the guess and the size after it
    sit on one flat tile under the budget, and a layout change just past the
    answer doubles the peak. The search steps up by the distance the line gives
    (116 examples here) instead of compiling twice the batch and halving down
    from it (19 compiles before; 10 now)."""
    def peak(b: int) -> int:
        p = 8_400_000 + 1024 * (b // 128) * 128
        return 2 * p if b > 57_340 else p

    budget, calls = 64 << 20, []

    def compile_peak(call, choice, batch, donated):
        calls.append(batch)
        return peak(batch)

    answer = search(None, _choice(4096, 4), budget, compile_peak=compile_peak)
    assert answer.largest == _truth(peak, budget, 4) == 57_340
    assert calls[:4] == [4096, 8192, 57_332, 57_336]  # the guess pair: both fit, equal
    assert peak(57_332) == peak(57_336) <= budget
    assert calls[4] == 57_336 + 116 and max(calls) < 2 * 57_336
    assert answer.compiles == len(calls) <= 10


@pytest.mark.parametrize("name", COSTS)
@pytest.mark.parametrize("offset", [-40, 0, 40])
def test_told_another_settings_batch_it_stops_ties_or_goes_on(name, offset):
    """``beat``: a batch another setting fits. Where this setting does not fit
    it, the search stops there after two compiles; else it finds its own answer."""
    peak, budget, step = COSTS[name], 20_000, 1
    truth = _truth(peak, budget, step)
    beat = truth + offset
    calls = []

    def compile_peak(call, choice, batch, donated):
        calls.append(batch)
        return peak(batch)

    answer = search(None, _choice(16, step), budget, beat=beat, compile_peak=compile_peak)
    if offset > 0:  # it cannot fit as many as the other setting
        assert (answer.largest, answer.below, calls) == (None, beat, [16, beat])
        assert peak(beat) > budget
    else:
        assert answer.largest == truth and answer.below is None
        assert calls[:2] == [16, beat] and truth + step in calls
        if offset == 0:  # a tie: the size and the next one up, and no more
            assert calls == [16, beat, beat + 1]


@pytest.mark.parametrize("capacity", [150, 400, 8, 20])
def test_sizes_the_targets_compiler_refuses_do_not_fit(capacity):
    """XLA:TPU fails the compile of a program larger than the chip (RESOURCE_EXHAUSTED):
    such a size does not fit whatever the budget says, and has no peak."""
    from memscope.variants.fit import OverCapacity

    peak, budget = COSTS["linear"], 20_000  # the budget alone allows 513

    def compile_peak(call, choice, batch, donated):
        if batch > capacity:
            raise OverCapacity(batch, None, "RESOURCE_EXHAUSTED: Ran out of memory on HBM")
        return peak(batch)

    answer = search(None, _choice(16), budget, compile_peak=compile_peak)
    assert answer.largest == min(capacity, 513)
    refused = dict(answer.refused)
    assert answer.largest + 1 in refused or capacity >= 513
    assert all(b > capacity for b in refused) and all(
        p is None for b, p in answer.rows if b in refused)
    if capacity < 16:  # the captured size itself is refused: halved down to it
        assert "does not compile for the target" in answer.note


def _rematerialized(b: int) -> int:
    """A peak that grows, then stays under the limit while the compiler
    rematerializes (not monotone: some sizes over it), then goes over."""
    if b <= 350:
        return 1000 + 37 * b
    if b > 450:
        return 25_000 + b
    return 20_500 if b % 3 == 2 else 14_000 + (b * 7919) % 900


@pytest.mark.parametrize("size", [16, 100, 400])
def test_a_peak_not_monotone_gives_a_size_that_fits_below_one_that_does_not(size):
    budget, calls = 20_000, []

    def compile_peak(call, choice, batch, donated):
        calls.append(batch)
        return _rematerialized(batch)

    answer = search(None, _choice(size), budget, compile_peak=compile_peak)
    assert answer.largest is not None and answer.compiles < MAX_COMPILES
    assert _rematerialized(answer.largest) <= budget < _rematerialized(answer.largest + 1)
    assert answer.largest in calls and answer.largest + 1 in calls


def test_a_size_that_fits_above_one_that_does_not_is_said():
    """The line from the captured sizes meets the budget at 513, which does not
    fit (a layout the compiler picks there); 514, compiled with it, fits (it
    rematerializes): the answer is below 513, and the note says 514 fits."""
    def peak(b: int) -> int:
        if b == 513:
            return 30_000
        return 1000 + 37 * b if b < 400 else 15_000 if b <= 600 else 40_000

    answer = search(None, _choice(16), 20_000,
                    compile_peak=lambda call, choice, batch, donated: peak(batch))
    assert answer.largest == 512 and answer.compiles < MAX_COMPILES
    assert "not monotone" in answer.note and "batch 514, above 513" in answer.note


def test_where_the_search_stops_the_answer_is_the_largest_size_compiled_that_fits():
    """A compiler that refuses far above the line's guess and says nothing of by
    how much: halving from the captured size runs out of compiles. The answer is
    still the largest size compiled that fits (below the first that does not),
    said unconfirmed, with the sizes left between."""
    capacity = 3_000_000_007

    def compile_peak(call, choice, batch, donated):
        if batch > capacity:
            raise OverCapacity(batch, None, "RESOURCE_EXHAUSTED: Ran out of memory")
        return 1000 + batch

    answer = search(None, _choice(16), 1 << 62, compile_peak=compile_peak)
    assert answer.compiles == MAX_COMPILES and answer.largest is not None
    rows = dict(answer.rows)
    assert answer.largest <= capacity < answer.above and answer.above in dict(answer.refused)
    assert answer.largest == max(b for b, p in rows.items() if p is not None and b < answer.above)
    assert answer.above > answer.largest + 1 and answer.note == (
        f"the search stopped after {MAX_COMPILES} compiles: {answer.largest} fits and "
        f"{answer.above} does not; the {answer.above - answer.largest - 1} sizes between "
        "were not compiled")


def _tpu_refusal(batch: int, need: int, capacity: int, temporaries: int) -> OverCapacity:
    """XLA:TPU's words for a size over the chip: the temporaries alone over it
    (printed to two decimals of a GiB), else the need and the excess to three figures."""
    from memscope.variants.fit import over_capacity

    gib = 1 << 30
    if temporaries > capacity:
        text = (f"RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, the "
                f"total memory required for HLO temporaries ({temporaries / gib:.2f}G) exceeds "
                f"available HBM ({capacity / gib:.2f}G). HLO module: jit_step.")
    else:
        text = (f"RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: XLA:TPU compile permanent error. "
                f"Ran out of memory in memory space hbm. Used {need / gib:.2f}G of "
                f"{capacity / gib:.2f}G hbm. Exceeded hbm capacity by "
                f"{(need - capacity) / 1024:.1f}K.")
    found = over_capacity(batch, RuntimeError(text))
    assert isinstance(found, OverCapacity)
    return found


@pytest.mark.parametrize("step", [1, 8])
def test_the_compilers_excess_brackets_a_chip_smaller_than_the_budget(step):
    """``fit --target tpu:v5e:1x1`` on an MLP: the budget is the chip's 16 GiB, the
    compiler's capacity less than that, its need growing twice as fast as the
    peak (its own count), far sizes refused for the temporaries alone. Its words
    (how far over) find the answer, confirmed at N and N + step, within the
    search's compiles: halving from the captured size took more than it has."""
    capacity, per = 16_911_433_728, 1888

    def need(b: int) -> int:
        return 16_907_660_800 + 2 * per * (b - 8_955_136)

    def compile_peak(call, choice, batch, donated):
        if need(batch) > capacity:
            raise _tpu_refusal(batch, need(batch), capacity, need(batch) - 1000 * per)
        return 314_880 + per * batch

    answer = search(None, _choice(32, step), 16 << 30, compile_peak=compile_peak)
    truth = _truth(lambda b: 0 if need(b) <= capacity else 1, 0, step)
    assert (answer.largest, answer.above) == (truth, truth + step)
    assert answer.compiles < MAX_COMPILES
