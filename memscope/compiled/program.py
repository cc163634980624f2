"""One compiled program as plain records: its leaves, donation, and what the HLO says.

Built by :mod:`memscope.compiled.read`; classified by :mod:`memscope.analysis.fates`.
"""

from __future__ import annotations

from dataclasses import dataclass

from memscope.compiled.hlo import HloFacts
from memscope.report.memory import is_host_kind

#: Suffix of an output that is the new value of one of the call's values, which
#: the caller writes back into it after the call: JAX, into a mutable hijax value
#: (JAX 0.7 to 0.10); ``nnx.jit``, into an argument's module.
WRITTEN_BACK = " (written back)"


@dataclass(frozen=True)
class Leaf:
    """One flat argument or result of a call, named as JAX names it."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    sharding: str | None = None
    #: the leaf's shape and bytes on each device it is sharded over
    shard_shape: tuple[int, ...] | None = None
    device_bytes: int | None = None
    #: the sharding's memory kind (``device``, ``pinned_host``, ``unpinned_host``);
    #: ``None`` where the sharding names none
    memory_kind: str | None = None

    @property
    def in_host_memory(self) -> bool:
        """True for a leaf placed in host memory (a ``*_host`` memory kind)."""
        return is_host_kind(self.memory_kind)

    @property
    def aval_text(self) -> str:
        """The leaf as JAX prints an aval: ``float32[4,8]``."""
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class Program:
    """One compiled program, as seen from the call that ran it.

    Index spaces: *inputs*/*outputs* are the call's flat dynamic leaves (each
    array of a hijax value one; the outputs begin with the new values JAX writes
    back into mutable ones); *args* and *results* are the lowered ``main``
    function's, which add effect tokens, drop pruned arguments and may hoist
    constants into arguments.
    """

    inputs: tuple[Leaf, ...]
    donated: tuple[bool, ...]
    outputs: tuple[Leaf, ...]
    #: per main argument: the input it carries, None for a token or a hoisted constant
    arg_inputs: tuple[int | None, ...]
    #: per main result: the output it carries, None for a token
    result_outputs: tuple[int | None, ...]
    #: per main argument: the result JAX fixed as its alias (``tf.aliasing_output``)
    requested_alias: tuple[int | None, ...]
    #: per main argument: JAX offered it to XLA as an optional ``jax.buffer_donor``
    requested_donor: tuple[bool, ...]
    hlo: HloFacts
    #: devices the program runs on (its figures are per device); None if unknown
    devices: int | None = None
    #: per input: what the program does with it when it is a ``jax.Ref``
    #: (``updated``, ``read``, ``written``, ``unused``), else None; empty: no Ref
    refs: tuple[str | None, ...] = ()
    #: the Refs the function closes over (JAX passes each as an extra argument
    #: after the kept ones), what it does with each, and each one's main argument
    closed_refs: tuple[Leaf, ...] = ()
    closed_ref_access: tuple[str, ...] = ()
    closed_ref_args: tuple[int, ...] = ()
    #: the arrays of the hijax values the function closes over (JAX passes them
    #: as arguments after the constants it hoisted, and returns the new values
    #: of the mutable ones), and each one's main argument
    closed_hijax: tuple[Leaf, ...] = ()
    closed_hijax_args: tuple[int, ...] = ()
    #: per input: the role its framework's own types say (``parameters``,
    #: ``optimizer``, ``model_state``; :func:`memscope._frameworks.type_role`),
    #: else None; empty where they could not be read
    type_roles: tuple[str | None, ...] = ()

    def role_hints(self) -> dict[str, str]:
        """Input path -> the role its framework's types say (:attr:`type_roles`)."""
        return {leaf.path: role for leaf, role in zip(self.inputs, self.type_roles,
                                                      strict=False) if role is not None}

    def ref_access(self, i: int) -> str | None:
        """What the program does with input ``i`` if it is a Ref, else None."""
        return self.refs[i] if i < len(self.refs) else None
