"""The model sizes the benchmarks take, declared once: ``--size NAME`` picks one,
``--layers``, ``--width``, ``--batch`` and ``--seq`` change one figure of it.

Each benchmark defaults to the size docs/performance.md reports for it; they
differ on purpose, by what each measures (a real training run, a long compile,
many buffers, a model that fills a budget), and ``small`` is the one every
benchmark runs at to check that it runs (``run_all --quick``, tests/test_benchmarks.py).
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Size:
    """A model's shape: layers, width (the model dimension), batch and sequence length."""

    layers: int
    width: int
    batch: int = 8
    seq: int = 64


SIZES = {
    # tiny: checks that a benchmark runs, in seconds
    "small": Size(layers=1, width=32, seq=16),
    # sample_programs/transformer_adam.py's own size: 405 input leaves, the
    # real-sized training run (bench_real, bench_live, bench_roles, bench_remat, bench_plan)
    "real": Size(layers=8, width=128),
    # the plain transformer (benchmarks.models) compiled under each donation (bench_variants)
    "wide": Size(layers=8, width=256, batch=4),
    # the plain transformer's long compile, thousands of instructions (bench_analysis)
    "long": Size(layers=24, width=256, batch=4),
    # transformer_adam deep and narrow: a long compile, little compute (bench_real)
    "long_narrow": Size(layers=24, width=32),
    # many small layers: many buffers to decode (bench_buffers)
    "deep": Size(layers=160, width=64),
    # an MLP large enough that a memory budget cuts its batch (bench_fit_frameworks)
    "mlp": Size(layers=8, width=1024, batch=64),
    # the scanned LM compiled for a --target (bench_target)
    "target": Size(layers=4, width=256),
}
FIGURES = tuple(f.name for f in dataclasses.fields(Size))


def add_size_options(parser: argparse.ArgumentParser, default: str,
                     figures: tuple[str, ...] = FIGURES) -> None:
    """``--size`` (``default`` unless given) and an option for each of the
    ``figures`` of it that the benchmark's model takes."""
    parser.add_argument("--size", choices=list(SIZES), default=default,
                        help=f"the model's size (default {default}: {SIZES[default]})")
    for name in figures:
        parser.add_argument(f"--{name}", type=int, help=f"the model's {name} (default: the size's)")


def parse_with_size(parser: argparse.ArgumentParser,
                    argv: list[str] | None = None) -> tuple[argparse.Namespace, Size]:
    """The parsed options, each figure not given taken from ``--size``; and the size."""
    args = parser.parse_args(argv)
    size = dataclasses.replace(SIZES[args.size], **{
        name: getattr(args, name) for name in FIGURES if getattr(args, name, None) is not None})
    for name in FIGURES:
        setattr(args, name, getattr(size, name))
    return args, size


def size_options(size: Size, figures: tuple[str, ...] = FIGURES) -> list[str]:
    """The command-line options that give a program the same size (its ``figures``)."""
    return [option for name in figures
            for option in (f"--{name}", str(getattr(size, name)))]
