"""What ``memscope fit --plan`` costs beside one ``memscope fit``, on the bundled
transformer, and whether each row it prints holds.

Runs, interleaved, in one invocation: ``memscope fit`` and ``memscope fit --plan``
(each with memscope's cache empty, as a first run), then the plan again with the
cache the first plan filled. Prints per command the median wall time, the
compiles and the ratio to ``fit``. With ``--verify`` (XLA:CPU, no ``--target``),
each row is checked by JAX's own compiles of the transformer's step written with
that setting by hand (``jax.checkpoint`` with the policy, ``donate_argnames``):
its batch fits the budget by memscope's peak rule and one step more does not; a
row stopped early does not fit the size it names.

    python -m benchmarks.bench_plan --memory 200MiB --verify
    python -m benchmarks.bench_plan --memory 16GiB --target tpu:v5e --width 512 --seq 256

No figure here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks._cache import timed_json as measure
from benchmarks.models import TRANSFORMER_ADAM as SAMPLE
from benchmarks.models import load_program
from benchmarks.sizes import add_size_options, parse_with_size, size_options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory", default="200MiB")
    parser.add_argument("--target")
    add_size_options(parser, "real")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--verify", action="store_true")
    parser.add_argument("--json", help="write the last plan here")
    a, size = parse_with_size(parser)
    shape = ["--steps", "2", *size_options(size)]
    fit = [sys.executable, "-m", "memscope", "fit", "--format", "json", "--memory", a.memory,
           *(["--target", a.target] if a.target else [])]
    runs: dict[str, list[tuple[float, dict]]] = {"fit": [], "fit --plan": [],
                                                 "fit --plan, again": []}
    with tempfile.TemporaryDirectory() as folder:
        for i in range(a.repeat):  # interleaved, so drift hits every command alike
            runs["fit"].append(measure([*fit, str(SAMPLE), *shape], None))
            cache = os.path.join(folder, f"cache{i}")
            plan = [*fit, "--plan", str(SAMPLE), *shape]
            runs["fit --plan"].append(measure(plan, cache))
            runs["fit --plan, again"].append(measure(plan, cache))
    base = statistics.median(w for w, _ in runs["fit"])
    print(f"transformer: {' '.join(shape[2:])}; budget {a.memory}"
          + (f"; target {a.target}" if a.target else "") + f"; {a.repeat} runs each, "
          f"interleaved; {os.cpu_count()} cores")
    print(f"{'command':<20} {'wall s':>7} {'compiles':>9} {'cached':>7} {'ratio to fit':>13}")
    for name, done in runs.items():
        wall = statistics.median(w for w, _ in done)
        last = done[-1][1]
        print(f"{name:<20} {wall:>7.1f} {last['compiles']:>9} {last.get('cached', 0):>7} "
              f"{wall / base:>13.2f}")
    plan = runs["fit --plan"][-1][1]
    print(f"winner: {plan['winner']} at batch {plan['rows'][0]['largest']} "
          f"(as written: {next(r for r in plan['rows'] if r['kind'] == 'written')['largest']})")
    if a.json:
        Path(a.json).write_text(json.dumps(plan, indent=2))
    if a.verify:
        if a.target:
            raise SystemExit("--verify compiles here (XLA:CPU): leave --target out")
        verify(plan, a)


# ---------------------------------------------- the rows, by JAX's compiles --


def _policy(name: str):
    import jax

    policies = jax.checkpoint_policies
    if name == "offload_dot_with_no_batch_dims":
        return policies.offload_dot_with_no_batch_dims("device", "pinned_host")
    return getattr(policies, name)


def _peak(compiled) -> int:
    from memscope.report import peak_rule

    s = compiled.memory_analysis()
    return peak_rule(s.argument_size_in_bytes, s.output_size_in_bytes, s.alias_size_in_bytes,
                     s.temp_size_in_bytes, getattr(s, "peak_memory_in_bytes", None))[0]


def verify(plan: dict, a: argparse.Namespace) -> None:
    """Each row against the step written with its setting and compiled by JAX."""
    import jax
    import jax.numpy as jnp
    import optax

    mod = load_program(SAMPLE)
    params = jax.eval_shape(functools.partial(mod.init_params, layers=a.layers, width=a.width,
                                              seq=a.seq), jax.random.key(0))
    opt_state = jax.eval_shape(mod.optimizer.init, params)

    def compiled(row: dict, batch: int):
        policy = row["setting"].removesuffix(" + advised donation")
        loss = (mod.loss_fn if row["kind"] in ("written", "donation") else
                jax.checkpoint(lambda p, b, heads: mod.loss_fn(p, b, heads),
                               policy=_policy(policy), static_argnums=(2,)))

        def train_step(params, opt_state, batch):
            loss_value, grads = jax.value_and_grad(loss)(params, batch, 4)
            updates, opt_state = mod.optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss_value

        donate = ("params", "opt_state") if row["kind"] in ("donation", "combined") else ()
        data = {"tokens": jax.ShapeDtypeStruct((batch, a.seq), jnp.int32),
                "mask": jax.ShapeDtypeStruct((batch, a.seq), jnp.float32)}
        return jax.jit(train_step, donate_argnames=donate).lower(
            params, opt_state, data).compile()

    budget, step, checked = plan["budget_bytes"], plan["step"], 0
    for row in plan["rows"]:
        if row["largest"] is not None:
            fits, over = _peak(compiled(row, row["largest"])), _peak(
                compiled(row, row["largest"] + step))
            ok = fits == row["peak_bytes"] <= budget < over == row["over_bytes"]
            print(f"  {row['setting']:<40} {row['largest']:>6}: {fits:,} <= {budget:,} < "
                  f"{over:,}: {'ok' if ok else 'WRONG'}")
        elif row["below"] is not None:
            over = _peak(compiled(row, row["below"]))
            ok = over > budget
            print(f"  {row['setting']:<40} < {row['below']:>4}: {over:,} > {budget:,}: "
                  f"{'ok' if ok else 'WRONG'}")
        else:
            continue
        checked += 1
        if not ok:
            raise SystemExit(f"row {row['setting']!r} does not hold")
    print(f"verified {checked} rows by JAX's own compiles: each holds")


if __name__ == "__main__":
    main()
