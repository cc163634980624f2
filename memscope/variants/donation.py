"""Donation settings as plain data: which arguments a variant donates, and how to say it.

Pure: no JAX. :mod:`memscope.capturing` describes each call's top-level arguments
as :class:`Argument` records; this module turns a request ("none", "all", the
advisor's choice, or a ``--donate`` SPEC) into a :class:`Donation`, into the
``donate_argnums``/``donate_argnames`` pair ``jax.jit`` takes, and into the text
a user would write: ``jax.jit``'s keywords, or the donation setting of a
framework's jit wrapper (``eqx.filter_jit(donate=...)``, ``nnx.jit(...)``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from memscope.errors import MemscopeError

Style = Literal["argnums", "argnames"]

#: ``eqx.filter_jit``'s donation settings, in its own order.
EQX_DONATE = ("all", "all-except-first", "warn", "warn-except-first", "none")


@dataclass(frozen=True)
class FilterJit:
    """Donation spelled as ``eqx.filter_jit(donate=...)``.

    Equinox has one switch for the arrays of the first argument and one for
    every other argument (and the function's own arrays); ``warn`` is whether
    the user's setting lets JAX's "not usable" warning through (``"warn"``,
    ``"warn-except-first"``) rather than silencing it (``"all"``, ...).
    """

    warn: bool = False


@dataclass(frozen=True)
class NnxJit:
    """Donation spelled as ``nnx.jit(donate_argnums=..., donate_argnames=...)``,
    which hands both to ``jax.jit`` unchanged."""

    style: Style = "argnames"


#: How a function's donation is written: ``jax.jit``'s keywords or a wrapper's.
Spelling = Style | FilterJit | NnxJit


@dataclass(frozen=True)
class Argument:
    """One top-level argument of a call, after static arguments are removed.

    ``position`` is its index among the call's positional arguments (``None``
    when passed by keyword); ``name`` is its parameter name, or the keyword it
    was passed with. ``by_name`` says ``donate_argnames`` can reach it.
    ``leaves`` are its flat dynamic leaves, in JAX's flat order.
    """

    position: int | None
    name: str | None
    by_name: bool
    leaves: tuple[int, ...]
    has_arrays: bool = True

    @property
    def label(self) -> str:
        return self.name if self.name is not None else f"argument {self.position}"


@dataclass(frozen=True)
class Donation:
    """A set of top-level arguments to donate (indices into the call's arguments)."""

    arguments: frozenset[int]

    def leaf_mask(self, arguments: Sequence[Argument], num_leaves: int) -> tuple[bool, ...]:
        mask = [False] * num_leaves
        for a in self.arguments:
            for leaf in arguments[a].leaves:
                mask[leaf] = True
        return tuple(mask)

    def jit_options(self, arguments: Sequence[Argument]
                    ) -> tuple[tuple[int, ...] | None, tuple[str, ...] | None]:
        """``(donate_argnums, donate_argnames)`` for ``jax.jit`` with this donation.

        Positionally passed arguments go by number, keyword ones by name; an
        empty side is ``None`` so JAX infers it from the signature, as it does
        for a user who gives only one of them.
        """
        chosen = [arguments[i] for i in sorted(self.arguments)]
        nums = tuple(a.position for a in chosen if a.position is not None)
        names = tuple(a.name for a in chosen if a.position is None and a.name is not None)
        return (nums or None), (names or None)

    def setting(self, arguments: Sequence[Argument], style: Spelling) -> str:
        """What a user writes for this donation: ``jax.jit``'s keyword arguments,
        or the whole wrapper call (``nnx.jit(donate_argnames=("model",))``)."""
        if isinstance(style, FilterJit):
            return _filter_jit_setting(self, arguments, style)
        if isinstance(style, NnxJit):
            keywords = self.setting(arguments, style.style)
            return keywords if not self.arguments else f"nnx.jit({keywords})"
        chosen = [arguments[i] for i in sorted(self.arguments)]
        if not chosen:
            return "no donation"
        if style == "argnames" and all(a.by_name for a in chosen):
            return f"donate_argnames={_tuple([_quoted(a.name) for a in chosen])}"
        if all(a.position is not None for a in chosen):
            return f"donate_argnums={_tuple([str(a.position) for a in chosen])}"
        by_number = [str(a.position) for a in chosen if a.position is not None]
        by_name = [_quoted(a.name) for a in chosen if a.position is None]
        return f"donate_argnums={_tuple(by_number)}, donate_argnames={_tuple(by_name)}"


    def closest(self, arguments: Sequence[Argument], style: Spelling) -> Donation:
        """The smallest donation ``style`` can write that holds this one.

        ``eqx.filter_jit`` donates all of the first argument or none of it, and
        all of the others or none of them; ``jax.jit`` and ``nnx.jit`` write
        any set of arguments.
        """
        if not isinstance(style, FilterJit) or not self.arguments:
            return self
        first = {i for i, a in enumerate(arguments) if a.position == 0}
        rest = {i for i, a in enumerate(arguments) if a.position != 0 and a.leaves}
        return Donation(frozenset(rest | (first if self.arguments & first else set())))


def _filter_jit_setting(donation: Donation, arguments: Sequence[Argument],
                        style: FilterJit) -> str:
    """``eqx.filter_jit(donate="...")`` for ``donation``; where no setting donates
    exactly these arguments, say so and name the nearest."""
    holding = {i for i, a in enumerate(arguments) if a.leaves}
    chosen = donation.arguments & holding
    first = {i for i in holding if arguments[i].position == 0}
    suffix = "warn" if style.warn else "all"
    if not chosen:
        value = "none"
    elif chosen == holding:
        value = suffix
    elif chosen == holding - first:
        value = f"{suffix}-except-first"
    else:
        nearest = _filter_jit_setting(donation.closest(arguments, style), arguments, style)
        labels = ", ".join(arguments[i].label for i in sorted(chosen))
        return (f"donate only {labels} (no eqx.filter_jit setting donates exactly that; "
                f"the nearest is {nearest})")
    return f'eqx.filter_jit(donate="{value}")'


def wider_note(fix: Donation, wanted: Donation, arguments: Sequence[Argument],
                style: Spelling) -> str | None:
    """Where ``style`` cannot write ``wanted`` exactly and ``fix`` is its nearest
    setting (:meth:`Donation.closest`), what ``fix`` donates besides; else ``None``."""
    extra = [arguments[i].label for i in sorted(fix.arguments - wanted.arguments)
             if arguments[i].leaves]
    if not extra:
        return None
    return (f"eqx.filter_jit donates all or none of its first argument and all or none of "
            f"the others, so {fix.setting(arguments, style)} also donates "
            f"{', '.join(extra)}, which the advisor did not pick: do not read them after "
            "the call.")


def _quoted(name: str | None) -> str:
    return f'"{name}"'


def _tuple(items: Sequence[str]) -> str:
    # Python's own spelling: a one-element tuple keeps its comma.
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def as_written(arguments: Sequence[Argument], donated: Sequence[bool]) -> Donation:
    """The donation the function was jitted with, from JAX's per-leaf donation."""
    return Donation(frozenset(i for i, a in enumerate(arguments)
                              if any(donated[leaf] for leaf in a.leaves)))


def donate_none() -> Donation:
    return Donation(frozenset())


def donate_all(arguments: Sequence[Argument]) -> Donation:
    """Every argument that holds an array (Python scalars cannot be donated)."""
    return Donation(frozenset(i for i, a in enumerate(arguments) if a.has_arrays and a.leaves))


def advised(arguments: Sequence[Argument], written: Donation,
            candidate_leaves: Collection[int], drop: Collection[int] = ()) -> Donation:
    """The written donation less the arguments in ``drop``, plus every argument
    holding a candidate leaf."""
    extra = {i for i, a in enumerate(arguments) if set(a.leaves) & set(candidate_leaves)}
    return Donation((written.arguments - frozenset(drop)) | frozenset(extra))


def idle(arguments: Sequence[Argument], donation: Donation, taken: Sequence[bool],
         unusable: Sequence[bool]) -> frozenset[int]:
    """The donated arguments no output takes anything of: none of their leaves
    is ``taken`` (written into by an output) and at least one is ``unusable``.
    Donating them saves nothing; leaving them out keeps them for the caller."""
    return frozenset(i for i in donation.arguments
                     if arguments[i].leaves
                     and not any(taken[leaf] for leaf in arguments[i].leaves)
                     and any(unusable[leaf] for leaf in arguments[i].leaves))


@dataclass(frozen=True)
class DonationSpec:
    """A ``--donate`` SPEC as the user typed it: ``0,2``, ``opt_state``, ``all`` or ``none``."""

    text: str
    everything: bool = False
    numbers: tuple[int, ...] = ()
    names: tuple[str, ...] = ()


def parse_donation(text: str) -> DonationSpec:
    """Parse a ``--donate`` SPEC.

    Raises:
        MemscopeError: an empty SPEC or an empty item.
    """
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise MemscopeError(f"--donate {text!r}: give argument numbers or names separated "
                            "by commas (0,2 or params,opt_state), or all, or none")
    if items == ["all"]:
        return DonationSpec(text, everything=True)
    if items == ["none"]:
        return DonationSpec(text)
    numbers = tuple(int(i) for i in items if _is_int(i))
    names = tuple(i for i in items if not _is_int(i))
    for name in names:
        if not name.isidentifier():
            raise MemscopeError(f"--donate {text!r}: {name!r} is neither an argument number "
                                "nor an argument name")
    return DonationSpec(text, numbers=numbers, names=names)


def _is_int(item: str) -> bool:
    return item.isdigit()


def resolve_spec(spec: DonationSpec, arguments: Sequence[Argument], *, function: str,
                 parameters: Sequence[str] | None, static: Collection[str | int]) -> Donation:
    """The arguments of one call that ``spec`` names.

    ``parameters`` are the function's parameter names in order (``None`` when
    it has no inspectable signature); ``static`` holds the positions and names
    of its static arguments.

    Raises:
        MemscopeError: a number out of range, a name the function does not
            have, or a static argument.
    """
    if spec.everything:
        return donate_all(arguments)
    chosen: set[int] = set()
    known = ", ".join(parameters) if parameters else "none that can be named"
    for n in spec.numbers:
        position = n
        match = [i for i, a in enumerate(arguments) if a.position == position]
        name = parameters[position] if parameters and 0 <= position < len(parameters) else None
        if not match and name is not None:
            match = [i for i, a in enumerate(arguments) if a.position is None and a.name == name]
        if not match:
            if n in static or name in static:
                raise MemscopeError(f"--donate {n}: argument {n} of {function} is static; "
                                    "static arguments cannot be donated")
            count = len(parameters) if parameters else len(arguments)
            raise MemscopeError(f"--donate {n}: {function} takes {count} argument"
                                f"{'s' if count != 1 else ''} here (0 to {count - 1}); "
                                f"its arguments: {known}")
        chosen.update(match)
    for name in spec.names:
        match = [i for i, a in enumerate(arguments) if a.name == name]
        if not match:
            if name in static:
                raise MemscopeError(f"--donate {name}: {name} is a static argument of "
                                    f"{function}; static arguments cannot be donated")
            if parameters is None or name not in parameters:
                raise MemscopeError(f"--donate {name}: {function} has no argument {name!r}; "
                                    f"its arguments: {known}")
            continue  # a parameter left at its default: nothing to donate
        chosen.update(match)
    return Donation(frozenset(chosen))


@dataclass(frozen=True)
class VariantRequest:
    """Also compile the captured functions with the donation ``spec`` (``memscope diff``).

    ``functions`` names the functions to do it for; ``None`` means all.
    """

    spec: DonationSpec
    functions: frozenset[str] | None = None
