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
# Set-up (the wheels the image lacks, carried in .whl/): benchmarks/_gpu_setup.sh.
set -u
. benchmarks/_gpu_setup.sh
export PYTHONWARNINGS="${PYTHONWARNINGS:-}"
SUITE_S="${SUITE_S:-380}" GPU_TESTS_S="${GPU_TESTS_S:-150}" FIGURES_S="${FIGURES_S:-260}"

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
