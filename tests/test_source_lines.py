"""memscope's own frames are never the user's source line.

A library's jitted helper made while memscope runs (optax's ``bias_correction``,
an ``inline=True`` jit) is called through memscope's stand-in during the outer
trace; its ops were attributed to ``memscope/capture.py`` (now ``memscope/capturing/``). JAX is told to skip
memscope's frames as it skips its own, so the lines are the ones JAX records
without memscope.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import memscope
from tests.support.cli import MEMSCOPE

PROGRAM = '''\
import jax, jax.numpy as jnp, optax

opt = optax.adam(1e-3)


def step(params, state):
    grads = jax.tree.map(jnp.sin, params)
    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state


params = {"w": jnp.ones((64, 64))}
args = (params, opt.init(params))
'''

#: The same program read without memscope's capture: what JAX itself records.
PLAIN = PROGRAM + '''
import json
from memscope.program.sites import display_path
from memscope.compiled.read import read_compiled
from memscope.compiled.buffers import breakdown
facts = read_compiled(jax.jit(step), args, {})
b = breakdown(facts.buffers, facts.memory, display_path)
print(json.dumps(sorted({s.source for s in b.by_source if s.source})))
'''


def test_sources_are_what_jax_records_without_memscope(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(PROGRAM + "jax.jit(step)(*args)\n", encoding="utf-8")
    (tmp_path / "plain.py").write_text(PLAIN, encoding="utf-8")
    plain = subprocess.run([sys.executable, "plain.py"], cwd=tmp_path, capture_output=True,
                           text=True, check=True, timeout=300)
    expected = set(json.loads(plain.stdout.splitlines()[-1]))
    subprocess.run([MEMSCOPE, "run", "-q", "-o", "r.json", "prog.py"], cwd=tmp_path,
                   check=True, capture_output=True, timeout=300)
    (fn,) = json.loads((tmp_path / "r.json").read_text())["functions"]
    sources = {s["source"] for s in fn["buffers"]["by_source"] if s["source"]}
    sources |= {t["source"] for t in fn["buffers"]["temp_buffers"] if t["source"]}
    package = Path(memscope.__file__).parent.resolve()

    def in_memscope(source: str) -> bool:
        path = Path(source.rsplit(":", 1)[0])
        return (tmp_path / path).resolve().is_relative_to(package)  # an absolute path wins

    assert not any(in_memscope(s) for s in sources), sources
    assert any("optax" in s for s in sources)  # the library's own line, as without memscope
    assert sources == expected
