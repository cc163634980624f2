#!/usr/bin/env bash
# One GPU session's checks in one call of the device tool (a session has 15
# minutes of device time, start included): the GPU-marked tests, the figures of
# benchmarks/gpu_figures.py, and the rest of the suite on 10 workers beside
# them. It runs under the device image's own JAX and packages (memscope from
# this checkout), each stage under its own time limit so that the results are
# copied back even when a stage runs long:
#
#     bash benchmarks/gpu_session.sh      # on the device; results in $OUT
#
# Wheels the image lacks (libcst and pyyaml, for `memscope fix`) travel in .whl/
# (ignored by git: carry it).
set -u
OUT="${OUT:-/tmp/gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONWARNINGS="${PYTHONWARNINGS:-}"
SUITE_S="${SUITE_S:-380}" GPU_TESTS_S="${GPU_TESTS_S:-150}" FIGURES_S="${FIGURES_S:-260}"

if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --find-links .whl --no-deps --no-compile \
    --no-cache-dir --upgrade --target /tmp/site libcst pyyaml && export PYTHONPATH=/tmp/site
fi
# The pytest plugin is found through the installed entry point; where an
# editable install cannot be made, memscope is still imported from here.
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$OUT/install.log" 2>&1 \
  || echo "editable install failed: memscope from PYTHONPATH" >>"$OUT/install.log"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import sys, jax, jaxlib; print(sys.version); print("jax", jax.__version__, "jaxlib", jaxlib.__version__, jax.devices())'
  python3 -m pip list 2>/dev/null | grep -iE '^(jax|jaxlib|jax-cuda|equinox|flax|optax|pytest|libcst|numpy|setuptools)[ -]'
} >"$OUT/env.txt" 2>&1

# The suite but the GPU-marked and real-sized tests, on 10 workers that each
# grow their GPU memory as needed, up to 4% of it.
(
  XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_MEM_FRACTION=0.04 \
    timeout "$SUITE_S" python3 -m pytest -q -n 10 --dist loadfile -p no:cacheprovider \
    -p no:benchmark -m "not gpu and not real_sized" --timeout 200 -rfE \
    --junitxml="$OUT/suite.xml" >"$OUT/suite.log" 2>&1
  echo "suite exit $?" >>"$OUT/suite.log"
) &
suite=$!

XLA_PYTHON_CLIENT_PREALLOCATE=false timeout "$GPU_TESTS_S" python3 -m pytest -v -p no:cacheprovider \
  -p no:benchmark -m gpu --timeout 100 -rsfE >"$OUT/gpu-tests.log" 2>&1
echo "gpu tests exit $?" >>"$OUT/gpu-tests.log"

# Figures with half the GPU (the suite's workers have the rest).
mkdir -p /tmp/fig
XLA_PYTHON_CLIENT_MEM_FRACTION=0.5 timeout "$FIGURES_S" \
  python3 benchmarks/gpu_figures.py /tmp/fig ${FIGURE_PARTS:-direct direct_untuned samples oom repeat} \
  >"$OUT/figures.log" 2>&1
echo "figures exit $?" >>"$OUT/figures.log"
cp /tmp/fig/figures.json "$OUT/" 2>/dev/null
tar -C /tmp -cJf "$OUT/reports.tar.xz" fig 2>/dev/null

wait "$suite"
