"""memscope's benchmarks, each a module run from the checkout's root:
``python -m benchmarks.bench_real`` (docs/performance.md). The model sizes they
take are declared once, in :mod:`benchmarks.sizes`; the models in
:mod:`benchmarks.models`."""
