"""Linear layouts over F2, and the tile-locality queries the epilogue legalizer needs.

Why this module exists
----------------------
An epilogue fused into a GEMM runs on the accumulator tile *as the hardware holds it*:
each element lives in some register of some lane of some warp.  Whether an epilogue op
is cheap (registers only), needs lane shuffles, needs a shared-memory round trip, or is
impossible inside one CTA depends only on that placement.  Triton describes every
distributed tile placement as a *linear layout*: a linear map over F2 (XOR is addition)
from hardware bits (``register``, ``lane``, ``warp``, ``block``) to tensor-index bits
(``dim0`` = rows, ``dim1`` = columns, ...).  Linearity turns the legality questions into
small linear-algebra problems:

* "where is the partner of element t at ``t XOR delta``?"  ->  is ``delta`` in the span of
  the images of the register bits (same thread), of register+lane bits (same warp), of
  register+lane+warp bits (same CTA), or not in the image at all (outside the tile)?
* "where does a reduction along an axis complete?"  ->  how much of the axis subspace is
  covered by each level's span.
* "what if the weight columns are interleaved first?"  ->  a bit permutation of the column
  index is itself an F2 map P, and the partner becomes ``P(delta)``.

The module is plain Python (no numpy, no triton, no xDSL) so that the legalizer can use it
everywhere, and the test-suite can check it bit-for-bit against Triton's own
``LinearLayout`` where Triton is installed.

Conventions (same as Triton's ``LinearLayout``)
-----------------------------------------------
``bases[in_dim][i]`` is the image of input bit ``i`` of ``in_dim``: one int per out-dim, in
out-dim order.  All sizes are powers of two.  The product ``A * B`` stacks B above A on
shared dims; ``A.compose(B)`` is ``B(A(x))``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping, Sequence, Union

__all__ = [
    "LinearLayout",
    "Level",
    "ReductionInfo",
    "AccumulatorChoice",
    "DEFAULT_DIM_LEVELS",
    "f2_rank",
    "f2_solve",
    "f2_in_span",
    "f2_intersection_dim",
    "identity_standard_nd",
    "blocked",
    "nvidia_mma_v2",
    "nvidia_mma_v3",
    "sliced",
    "accumulator_encoding",
    "accumulator_layout",
    "pair_level",
    "pair_hardware_delta",
    "pair_level_for_stride",
    "reduction_level",
    "reduction_info",
    "bit_permutation_layout",
    "interleave_layout",
    "permutation_layout",
    "permute_delta",
    "brute_pair_level",
    "brute_pair_level_map",
    "brute_pair_level_for_stride",
    "brute_reduction_info",
    "brute_reduction_level",
]

Delta = Union[Mapping[str, int], Sequence[int]]


# --------------------------------------------------------------------------------------
# F2 linear algebra on ints used as bit-vectors.
# --------------------------------------------------------------------------------------


def _is_pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


def _log2(x: int) -> int:
    if not _is_pow2(x):
        raise ValueError(f"{x} is not a positive power of two")
    return x.bit_length() - 1


class _F2Echelon:
    """Echelon basis of a subspace of F2^n that remembers how each row was formed.

    Remembering the combination (as a mask over the inserted vectors) is what lets a
    span test also return a preimage, which the legalizer needs to name the shuffle
    mask or register that holds a partner.
    """

    __slots__ = ("_rows",)

    def __init__(self) -> None:
        # leading bit -> (row vector, mask of inserted vectors XORed into it)
        self._rows: dict[int, tuple[int, int]] = {}

    def reduce(self, v: int) -> tuple[int, int]:
        combo = 0
        for pivot in sorted(self._rows, reverse=True):
            if (v >> pivot) & 1:
                row, c = self._rows[pivot]
                v ^= row
                combo ^= c
        return v, combo

    def add(self, v: int, tag: int = 0) -> bool:
        """Insert ``v``; returns False when it was already in the span."""
        residual, combo = self.reduce(v)
        if residual == 0:
            return False
        self._rows[residual.bit_length() - 1] = (residual, combo ^ tag)
        return True

    @property
    def rank(self) -> int:
        return len(self._rows)


def f2_rank(vectors: Iterable[int]) -> int:
    """Rank over F2 of a set of bit-vectors."""
    e = _F2Echelon()
    for v in vectors:
        e.add(v)
    return e.rank


def f2_solve(columns: Sequence[int], target: int) -> int | None:
    """A subset of ``columns`` (as a bit mask over their indices) whose XOR is ``target``.

    Returns None when ``target`` is not in the span.  Columns that depend on earlier
    ones are never used, so the answer is the one with all free variables at zero: the
    same convention as Triton's ``getFreeVariableMasks`` and ``invertAndCompose``.
    """
    e = _F2Echelon()
    for i, c in enumerate(columns):
        e.add(c, 1 << i)
    residual, combo = e.reduce(target)
    return combo if residual == 0 else None


def f2_in_span(columns: Iterable[int], target: int) -> bool:
    e = _F2Echelon()
    for c in columns:
        e.add(c)
    return e.reduce(target)[0] == 0


def f2_intersection_dim(a: Iterable[int], b: Iterable[int]) -> int:
    """dim(span a  ∩  span b), by dim(A) + dim(B) - dim(A + B)."""
    a = list(a)
    b = list(b)
    return f2_rank(a) + f2_rank(b) - f2_rank(a + b)


def _merge_dim_orders(a: Sequence[str], b: Sequence[str]) -> list[str]:
    """Smallest list containing both orders as subsequences (Triton's ``supremum``).

    Product layouts keep dims in a predictable order so that builders reproduce Triton's
    basis order exactly.  When the two orders contradict each other, ``a`` wins and
    ``b``'s extra dims go last, which is what Triton does too.
    """
    in_a = set(a)
    in_b = set(b)
    common_a = [n for n in a if n in in_b]
    common_b = [n for n in b if n in in_a]
    if common_a != common_b:
        return list(a) + [n for n in b if n not in in_a]
    out: list[str] = []
    j = 0
    for n in a:
        if n in in_b:
            while b[j] != n:
                out.append(b[j])
                j += 1
            j += 1
        out.append(n)
    out.extend(b[j:])
    return out


# --------------------------------------------------------------------------------------
# The layout class.
# --------------------------------------------------------------------------------------

BasesInput = Union[Mapping[str, Sequence[Sequence[int]]], Sequence[tuple[str, Sequence[Sequence[int]]]]]
OutDimsInput = Union[Mapping[str, int], Sequence[tuple[str, int]], Sequence[str]]


class LinearLayout:
    """An immutable linear map over F2 from named input bits to named output bits.

    Stored exactly like Triton (ordered in-dims, each a tuple of bases; ordered out-dims
    with power-of-two sizes) so builders can be compared basis-for-basis with Triton.
    ``==`` is that structural comparison; ``equivalent`` compares the maps.
    """

    __slots__ = ("_bases", "_out", "_cols", "_in_offset", "_out_shift", "_hash")

    def __init__(
        self,
        bases: BasesInput,
        out_dims: OutDimsInput,
        *,
        require_surjective: bool = False,
    ) -> None:
        items = list(bases.items()) if isinstance(bases, Mapping) else list(bases)
        names = [n for n, _ in items]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate in-dim names: {names}")

        if isinstance(out_dims, Mapping):
            out_items = [(str(n), int(s)) for n, s in out_dims.items()]
        else:
            out_list = list(out_dims)
            if all(isinstance(o, str) for o in out_list):
                # Infer each size as the smallest power of two above every basis value,
                # as Triton's constructor without explicit sizes does.
                out_items = []
                for k, name in enumerate(out_list):
                    mx = 0
                    for _, bs in items:
                        for b in bs:
                            mx = max(mx, int(b[k]))
                    out_items.append((name, 1 << mx.bit_length()))
            else:
                out_items = [(str(n), int(s)) for n, s in out_list]  # type: ignore[misc]
        out_names = [n for n, _ in out_items]
        if len(set(out_names)) != len(out_names):
            raise ValueError(f"duplicate out-dim names: {out_names}")
        for n, s in out_items:
            if not _is_pow2(s):
                raise ValueError(f"out-dim {n!r} has size {s}, not a power of two")

        norm: list[tuple[str, tuple[tuple[int, ...], ...]]] = []
        for name, bs in items:
            row: list[tuple[int, ...]] = []
            for b in bs:
                t = tuple(int(v) for v in b)
                if len(t) != len(out_items):
                    raise ValueError(
                        f"basis {list(t)} of in-dim {name!r} has {len(t)} entries, "
                        f"expected one per out-dim {out_names}"
                    )
                for v, (on, os_) in zip(t, out_items):
                    if not 0 <= v < os_:
                        raise ValueError(
                            f"basis {list(t)} of in-dim {name!r} is out of range for out-dim "
                            f"{on!r} of size {os_}"
                        )
                row.append(t)
            norm.append((str(name), tuple(row)))

        set_ = object.__setattr__
        set_(self, "_bases", tuple(norm))
        set_(self, "_out", tuple(out_items))
        shift: dict[str, int] = {}
        acc = 0
        for n, s in out_items:
            shift[n] = acc
            acc += _log2(s)
        set_(self, "_out_shift", shift)
        cols: list[int] = []
        offs: dict[str, int] = {}
        for name, bs in norm:
            offs[name] = len(cols)
            for b in bs:
                flat = 0
                for v, (n, _) in zip(b, out_items):
                    flat |= v << shift[n]
                cols.append(flat)
        set_(self, "_cols", tuple(cols))
        set_(self, "_in_offset", offs)
        set_(self, "_hash", None)
        if require_surjective and not self.is_surjective():
            raise ValueError("layout is not surjective")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("LinearLayout is immutable")

    # ---- constructors ---------------------------------------------------------------

    @classmethod
    def empty(cls) -> "LinearLayout":
        return cls([], [])

    @classmethod
    def identity_1d(cls, size: int, in_dim: str, out_dim: str) -> "LinearLayout":
        n = _log2(size)
        return cls([(in_dim, [[1 << i] for i in range(n)])], [(out_dim, size)])

    @classmethod
    def zeros_1d(cls, size: int, in_dim: str, out_dim: str, out_dim_size: int = 1) -> "LinearLayout":
        """``size`` input values all mapping to 0: a broadcast (replication)."""
        n = _log2(size)
        return cls([(in_dim, [[0] for _ in range(n)])], [(out_dim, out_dim_size)])

    @classmethod
    def strided_1d(cls, size: int, stride: int, in_dim: str, out_dim: str) -> "LinearLayout":
        n = _log2(size)
        _log2(stride)
        return cls([(in_dim, [[stride << i] for i in range(n)])], [(out_dim, size * stride)])

    # ---- structure --------------------------------------------------------------------

    @property
    def in_dims(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self._bases)

    @property
    def out_dims(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self._out)

    @property
    def out_dim_sizes(self) -> dict[str, int]:
        return dict(self._out)

    @property
    def in_dim_sizes(self) -> dict[str, int]:
        return {n: 1 << len(b) for n, b in self._bases}

    @property
    def bases(self) -> dict[str, tuple[tuple[int, ...], ...]]:
        return dict(self._bases)

    def has_in_dim(self, name: str) -> bool:
        return name in self._in_offset

    def has_out_dim(self, name: str) -> bool:
        return name in self._out_shift

    def in_dim_size_log2(self, name: str) -> int:
        for n, b in self._bases:
            if n == name:
                return len(b)
        return 0

    def in_dim_size(self, name: str) -> int:
        return 1 << self.in_dim_size_log2(name)

    def out_dim_size(self, name: str) -> int:
        return dict(self._out).get(name, 1)

    def out_dim_size_log2(self, name: str) -> int:
        return _log2(self.out_dim_size(name))

    @property
    def num_in_bits(self) -> int:
        return len(self._cols)

    @property
    def num_out_bits(self) -> int:
        return sum(_log2(s) for _, s in self._out)

    @property
    def total_in_size(self) -> int:
        return 1 << self.num_in_bits

    @property
    def total_out_size(self) -> int:
        return 1 << self.num_out_bits

    def basis(self, in_dim: str, i: int) -> dict[str, int]:
        b = dict(self._bases)[in_dim][i]
        return {n: v for (n, _), v in zip(self._out, b)}

    # ---- flat (matrix) view -------------------------------------------------------------

    @property
    def columns(self) -> tuple[int, ...]:
        """Bases flattened to ints: out-dims packed low-to-high in out-dim order."""
        return self._cols

    def in_bit_range(self, in_dim: str) -> range:
        off = self._in_offset[in_dim]
        return range(off, off + self.in_dim_size_log2(in_dim))

    def flatten_out(self, values: Mapping[str, int]) -> int:
        flat = 0
        for n, v in values.items():
            if n not in self._out_shift:
                if v:
                    raise KeyError(f"unknown out-dim {n!r}")
                continue
            size = self.out_dim_size(n)
            if not 0 <= v < size:
                raise ValueError(f"{n}={v} out of range [0, {size})")
            flat |= v << self._out_shift[n]
        return flat

    def unflatten_out(self, flat: int) -> dict[str, int]:
        return {n: (flat >> self._out_shift[n]) & (s - 1) for n, s in self._out}

    def flatten_in(self, values: Mapping[str, int]) -> int:
        flat = 0
        for n, v in values.items():
            if n not in self._in_offset:
                if v:
                    raise KeyError(f"unknown in-dim {n!r}")
                continue
            size = self.in_dim_size(n)
            if not 0 <= v < size:
                raise ValueError(f"{n}={v} out of range [0, {size})")
            flat |= v << self._in_offset[n]
        return flat

    def unflatten_in(self, flat: int) -> dict[str, int]:
        return {
            n: (flat >> self._in_offset[n]) & ((1 << len(b)) - 1) for n, b in self._bases
        }

    def apply_flat(self, x: int) -> int:
        out = 0
        i = 0
        while x:
            if x & 1:
                out ^= self._cols[i]
            x >>= 1
            i += 1
        return out

    def apply(self, inputs: Mapping[str, int] | None = None, /, **kwargs: int) -> dict[str, int]:
        """Tensor index held at a hardware location; omitted in-dims count as 0."""
        vals = dict(inputs or {})
        vals.update(kwargs)
        return self.unflatten_out(self.apply_flat(self.flatten_in(vals)))

    def matrix_view(self) -> list[list[int]]:
        """Rows = out bits (low first), columns = in bits: Triton's ``get_matrix_view``."""
        return [[(c >> r) & 1 for c in self._cols] for r in range(self.num_out_bits)]

    def image_points(self) -> Iterator[int]:
        """Every (flat) output of every (flat) input, in input order (brute force)."""
        vals = [0] * self.total_in_size
        for x in range(1, self.total_in_size):
            low = (x & -x).bit_length() - 1
            vals[x] = vals[x & (x - 1)] ^ self._cols[low]
        return iter(vals)

    # ---- rank-based predicates ----------------------------------------------------------

    def rank(self) -> int:
        return f2_rank(self._cols)

    def is_surjective(self) -> bool:
        return self.rank() == self.num_out_bits

    def is_injective(self) -> bool:
        return self.rank() == self.num_in_bits

    def is_invertible(self) -> bool:
        return self.is_surjective() and self.is_injective()

    def free_variable_masks(self) -> dict[str, int]:
        """Input bits that add nothing new (broadcast / duplicate): bit i of in-dim d is
        free iff its basis is in the span of all earlier bases (Triton's definition)."""
        e = _F2Echelon()
        free = [not e.add(c) for c in self._cols]
        out: dict[str, int] = {}
        for n, _ in self._bases:
            m = 0
            for k, i in enumerate(self.in_bit_range(n)):
                if free[i]:
                    m |= 1 << k
            out[n] = m
        return out

    def contains_in_image(self, values: Mapping[str, int]) -> bool:
        try:
            flat = self.flatten_out(values)
        except (KeyError, ValueError):
            return False
        return f2_in_span(self._cols, flat)

    # ---- algebra ------------------------------------------------------------------------

    def __mul__(self, other: "LinearLayout") -> "LinearLayout":
        """Direct product: on a shared dim, ``self`` takes the low bits, ``other`` the high."""
        if not isinstance(other, LinearLayout):
            return NotImplemented
        ins = _merge_dim_orders(self.in_dims, other.in_dims)
        outs = _merge_dim_orders(self.out_dims, other.out_dims)
        a_shift = {n: self.out_dim_size_log2(n) for n in outs}
        a_b = dict(self._bases)
        b_b = dict(other._bases)
        a_out = {n: k for k, n in enumerate(self.out_dims)}
        b_out = {n: k for k, n in enumerate(other.out_dims)}
        new_bases: list[tuple[str, list[list[int]]]] = []
        for d in ins:
            rows: list[list[int]] = []
            for b in a_b.get(d, ()):
                rows.append([b[a_out[o]] if o in a_out else 0 for o in outs])
            for b in b_b.get(d, ()):
                rows.append([(b[b_out[o]] << a_shift[o]) if o in b_out else 0 for o in outs])
            new_bases.append((d, rows))
        sizes = [(o, self.out_dim_size(o) * other.out_dim_size(o)) for o in outs]
        return LinearLayout(new_bases, sizes)

    def compose(self, outer: "LinearLayout") -> "LinearLayout":
        """``outer(self(x))``: self's out-dims are fed to outer's in-dims of the same name."""
        for o, s in self._out:
            if s > 1 and (not outer.has_in_dim(o) or outer.in_dim_size(o) < s):
                raise ValueError(
                    f"cannot compose: out-dim {o!r} (size {s}) is not covered by the outer "
                    f"layout's in-dims {outer.in_dim_sizes}"
                )
        new_bases = []
        for d, bs in self._bases:
            rows = []
            for b in bs:
                img = outer.apply({o: v for (o, _), v in zip(self._out, b)})
                rows.append([img[o] for o in outer.out_dims])
            new_bases.append((d, rows))
        return LinearLayout(new_bases, outer._out)

    def invert_and_compose(self, outer: "LinearLayout") -> "LinearLayout":
        """C with ``outer(C(x)) == self(x)``: where, in outer's hardware, does each of my
        points live?  This is the core of a layout conversion (Triton's
        ``invertAndCompose``).

        Choices among several preimages follow Triton so conversions classify the same
        way: an in-dim that both layouts share with identical bases maps to itself (a
        broadcast warp stays the same warp rather than collapsing to warp 0), and every
        other basis takes the solution with outer's free variables at zero."""
        outs = list(dict.fromkeys(list(self.out_dims) + list(outer.out_dims)))
        for o, s in self._out:
            if s > 1 and outer.out_dim_size(o) < s:
                raise ValueError(f"out-dim {o!r} of size {s} is not covered by the outer layout")

        def sub(lay: "LinearLayout", d: str) -> list[tuple[int, ...]]:
            pos = {o: k for k, o in enumerate(lay.out_dims)}
            return [
                tuple(b[pos[o]] if o in pos else 0 for o in outs) for b in dict(lay._bases).get(d, ())
            ]

        def separate(lay: "LinearLayout", d: str) -> bool:
            # No output bit that d can flip is flipped by any other in-dim, so mapping d
            # to itself cannot conflict with the solve for the other dims.
            mine = rest = 0
            for e in lay.in_dims:
                for i in lay.in_bit_range(e):
                    if e == d:
                        mine |= lay._cols[i]
                    else:
                        rest |= lay._cols[i]
            return mine & rest == 0

        identity_dims = {
            d
            for d in outer.in_dims
            if self.has_in_dim(d)
            and sub(self, d) == sub(outer, d)
            and separate(outer, d)
            and separate(self, d)
        }
        reduced = _F2Echelon()
        full = _F2Echelon()
        for d in outer.in_dims:
            for i in outer.in_bit_range(d):
                full.add(outer._cols[i], 1 << i)
                if d not in identity_dims:
                    reduced.add(outer._cols[i], 1 << i)
        new_bases = []
        for d, bs in self._bases:
            rows = []
            for k, b in enumerate(bs):
                if d in identity_dims:
                    img = {n: 0 for n in outer.in_dims}
                    img[d] = 1 << k
                else:
                    flat = outer.flatten_out({o: v for (o, _), v in zip(self._out, b)})
                    residual, combo = reduced.reduce(flat)
                    if residual:
                        residual, combo = full.reduce(flat)
                    if residual:
                        raise ValueError(
                            f"basis {dict(zip(self.out_dims, b))} of in-dim {d!r} is not in "
                            "the image of the outer layout"
                        )
                    img = outer.unflatten_in(combo)
                rows.append([img[n] for n in outer.in_dims])
            new_bases.append((d, rows))
        return LinearLayout(new_bases, [(n, outer.in_dim_size(n)) for n in outer.in_dims])

    def pseudoinvert(self) -> "LinearLayout":
        """A right inverse of a surjective layout: for each tensor index, one holder."""
        if not self.is_surjective():
            raise ValueError("pseudoinvert needs a surjective layout")
        ident = LinearLayout.empty()
        for o, s in self._out:
            ident = ident * LinearLayout.identity_1d(s, o, o)
        return ident.invert_and_compose(self)

    def invert(self) -> "LinearLayout":
        if not self.is_invertible():
            raise ValueError("invert needs a bijective layout (use pseudoinvert otherwise)")
        return self.pseudoinvert()

    def transpose_outs(self, order: Sequence[str]) -> "LinearLayout":
        if sorted(order) != sorted(self.out_dims):
            raise ValueError(f"{list(order)} is not a permutation of {list(self.out_dims)}")
        idx = [self.out_dims.index(o) for o in order]
        return LinearLayout(
            [(d, [[b[k] for k in idx] for b in bs]) for d, bs in self._bases],
            [(o, self.out_dim_size(o)) for o in order],
        )

    def transpose_ins(self, order: Sequence[str]) -> "LinearLayout":
        if sorted(order) != sorted(self.in_dims):
            raise ValueError(f"{list(order)} is not a permutation of {list(self.in_dims)}")
        b = dict(self._bases)
        return LinearLayout([(d, b[d]) for d in order], self._out)

    def sublayout(self, in_dims: Sequence[str], out_dims: Sequence[str]) -> "LinearLayout":
        """Restrict to some in-dims and project onto some out-dims."""
        keep = [self.out_dims.index(o) for o in out_dims]
        b = dict(self._bases)
        return LinearLayout(
            [(d, [[x[k] for k in keep] for x in b.get(d, ())]) for d in in_dims],
            [(o, self.out_dim_size(o)) for o in out_dims],
        )

    # ---- comparison ---------------------------------------------------------------------

    def _canonical(self) -> tuple:
        live_outs = sorted(o for o, s in self._out if s > 1)
        pos = {o: k for k, o in enumerate(self.out_dims)}
        ins = []
        for d, bs in sorted(self._bases):
            if not bs:
                continue
            ins.append((d, tuple(tuple(b[pos[o]] for o in live_outs) for b in bs)))
        return (tuple((o, self.out_dim_size(o)) for o in live_outs), tuple(ins))

    def equivalent(self, other: "LinearLayout") -> bool:
        """Same map: ignores dim order and dims of size 1 (e.g. an empty ``block``)."""
        return self._canonical() == other._canonical()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LinearLayout):
            return NotImplemented
        return self._bases == other._bases and self._out == other._out

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = hash((self._bases, self._out))
            object.__setattr__(self, "_hash", h)
        return h

    def __repr__(self) -> str:
        bases = {d: [list(b) for b in bs] for d, bs in self._bases}
        return f"LinearLayout({bases!r}, {list(self._out)!r})"

    def __str__(self) -> str:
        lines = []
        for d, bs in self._bases:
            for i, b in enumerate(bs):
                lines.append(f" - {d}={1 << i} -> {tuple(b)}")
        outs = ", ".join(f"{o} (size {s})" for o, s in self._out)
        return "\n".join(lines + [f"where out dims are: [{outs}]"])


# --------------------------------------------------------------------------------------
# Builders that mirror Triton's encodings -> linear layouts (Triton 3.9 behaviour).
# --------------------------------------------------------------------------------------

REGISTER, LANE, WARP, BLOCK = "register", "lane", "warp", "block"


def _dim(i: int) -> str:
    return f"dim{i}"


def identity_standard_nd(in_dim: str, shape: Sequence[int], order: Sequence[int]) -> LinearLayout:
    """Identity on ``shape`` walking dims minor-to-major along ``order``."""
    if sorted(order) != list(range(len(shape))):
        raise ValueError(f"order {list(order)} is not a permutation of range({len(shape)})")
    ret = LinearLayout.empty()
    for d in order:
        ret = ret * LinearLayout.identity_1d(shape[d], in_dim, _dim(d))
    return ret


def _fit_to_shape(layout: LinearLayout, shape: Sequence[int], *, drop_registers: bool) -> LinearLayout:
    """Make the layout's codomain exactly ``shape`` the way Triton's
    ``combineCtaCgaWithShape`` does: wrap extra ``register`` bases (minor out-dim
    first, in the layout's out-dim order) when the tensor is larger, and zero the largest
    bases of an out-dim when it is smaller (a broadcast).  Triton 3.9 *removes*
    overflowing register bases for blocked layouts but zeroes them for MMA layouts;
    ``drop_registers`` selects which."""
    want = {_dim(i): s for i, s in enumerate(shape)}
    for o in layout.out_dims:
        have = layout.out_dim_size(o)
        if want[o] > have:
            if want[o] % have:
                raise ValueError(f"shape {want[o]} of {o} is not a multiple of {have}")
            layout = layout * LinearLayout.identity_1d(want[o] // have, REGISTER, o)
    bases = {d: [list(b) for b in bs] for d, bs in layout.bases.items()}
    outs = list(layout.out_dims)
    sizes = {o: layout.out_dim_size(o) for o in outs}
    dropped: set[int] = set()
    for k, o in enumerate(outs):
        actual = sizes[o]
        if actual <= want[o]:
            continue
        cands = [
            (bases[d][i][k], d, i)
            for d in layout.in_dims
            for i in range(len(bases[d]))
            if bases[d][i][k] != 0
        ]
        cands.sort(key=lambda c: -c[0])
        for _, d, i in cands:
            if actual <= want[o]:
                break
            if drop_registers and d == REGISTER:
                dropped.add(i)
            else:
                bases[d][i][k] = 0
            actual >>= 1
        sizes[o] = want[o]
    if drop_registers and dropped:
        bases[REGISTER] = [b for i, b in enumerate(bases[REGISTER]) if i not in dropped]
    for k, o in enumerate(outs):
        for d in bases:
            for b in bases[d]:
                if b[k] >= sizes[o]:
                    raise ValueError(f"layout does not fit shape {list(shape)} along {o}")
    return LinearLayout([(d, bases[d]) for d in layout.in_dims], [(o, sizes[o]) for o in outs])


def _finish(cta: LinearLayout, shape: Sequence[int], *, drop_registers: bool) -> LinearLayout:
    rank = len(shape)
    fitted = _fit_to_shape(cta, shape, drop_registers=drop_registers)
    # One CTA: the block dim exists (as in Triton) but has no bases.
    fitted = fitted * LinearLayout([(BLOCK, [])], [(o, 1) for o in fitted.out_dims])
    return fitted.transpose_outs([_dim(i) for i in range(rank)])


def _check_pow2_list(name: str, xs: Sequence[int]) -> None:
    for x in xs:
        if not _is_pow2(int(x)):
            raise ValueError(f"{name} must be powers of two, got {list(xs)}")


def blocked(
    shape: Sequence[int],
    size_per_thread: Sequence[int],
    threads_per_warp: Sequence[int],
    warps_per_cta: Sequence[int],
    order: Sequence[int],
) -> LinearLayout:
    """Triton's ``#ttg.blocked`` encoding on a tensor of ``shape`` (one CTA)."""
    rank = len(shape)
    for name, xs in (
        ("shape", shape),
        ("size_per_thread", size_per_thread),
        ("threads_per_warp", threads_per_warp),
        ("warps_per_cta", warps_per_cta),
    ):
        if len(xs) != rank:
            raise ValueError(f"{name} has rank {len(xs)}, expected {rank}")
        _check_pow2_list(name, xs)
    cta = (
        identity_standard_nd(REGISTER, size_per_thread, order)
        * identity_standard_nd(LANE, threads_per_warp, order)
        * identity_standard_nd(WARP, warps_per_cta, order)
    )
    return _finish(cta, shape, drop_registers=True)


def _nvidia_mma(
    shape: Sequence[int],
    warps_per_cta: Sequence[int],
    tile_m: int,
    tile_n: int,
    warp_order: Sequence[int],
) -> LinearLayout:
    # One warp's C fragment (PTX mma / wgmma D layout): 2 adjacent columns in registers,
    # 4 lanes across columns, 8 lanes down rows, then register repeats down the m rows
    # and across the n columns the warp owns.  Built with dim1 minor, as Triton does, so
    # wrap-around repeats go along columns first.
    if len(shape) != 2 or len(warps_per_cta) != 2:
        raise ValueError("MMA accumulators are rank 2")
    _check_pow2_list("shape", shape)
    _check_pow2_list("warps_per_cta", warps_per_cta)
    if tile_m % 8 or tile_n % 8 or not _is_pow2(tile_n):
        raise ValueError(f"bad MMA tile {tile_m}x{tile_n}")
    r, c = _dim(0), _dim(1)
    tile = (
        LinearLayout([(REGISTER, [])], [(c, 1), (r, 1)])
        * LinearLayout.identity_1d(2, REGISTER, c)
        * LinearLayout.identity_1d(4, LANE, c)
        * LinearLayout.identity_1d(8, LANE, r)
        * LinearLayout.identity_1d(tile_m // 8, REGISTER, r)
        * LinearLayout.identity_1d(tile_n // 8, REGISTER, c)
    )
    warps = identity_standard_nd(WARP, warps_per_cta, warp_order).transpose_outs([c, r])
    return _finish(tile * warps, shape, drop_registers=False)


def nvidia_mma_v3(shape: Sequence[int], warps_per_cta: Sequence[int], instr_n: int) -> LinearLayout:
    """Hopper ``wgmma`` fp32 accumulator (``#ttg.nvidia_mma`` version 3, instrShape
    ``[16, instr_n, k]``).  Warps of a warpgroup stack along M (warp order dim0-fastest),
    which is why a [4,1] warpgroup keeps a whole row inside one warp."""
    if (warps_per_cta[0] * warps_per_cta[1]) % 4:
        raise ValueError("wgmma needs whole warpgroups (a multiple of 4 warps)")
    return _nvidia_mma(shape, warps_per_cta, 16, instr_n, warp_order=(0, 1))


def nvidia_mma_v2(shape: Sequence[int], warps_per_cta: Sequence[int]) -> LinearLayout:
    """Ampere ``mma.sync m16n8`` accumulator (``#ttg.nvidia_mma`` version 2).  Same
    per-warp fragment as wgmma, but warps are laid out dim1-fastest."""
    return _nvidia_mma(shape, warps_per_cta, 16, 8, warp_order=(1, 0))


def sliced(parent: LinearLayout, dim: int) -> LinearLayout:
    """``#ttg.slice<dim, parent>``: the layout of a reduction result along ``dim``.

    The parent's hardware that differed only along ``dim`` now holds the same element, so
    lanes/warps that moved along ``dim`` become broadcasts; registers that moved only
    along ``dim`` disappear (a thread keeps one copy)."""
    rank = len(parent.out_dims)
    if not 0 <= dim < rank:
        raise ValueError(f"dim {dim} out of range for rank {rank}")
    if rank < 2:
        raise ValueError("slicing needs a layout of rank >= 2")
    proj = LinearLayout.empty()
    for i in range(rank):
        o = _dim(i)
        if i == dim:
            # Every index along the sliced dim maps to 0 of some surviving out-dim.
            zeros = [[0] for _ in range(parent.out_dim_size_log2(o))]
            proj = proj * LinearLayout([(o, zeros)], [(_dim(0), 1)])
        else:
            proj = proj * LinearLayout.identity_1d(parent.out_dim_size(o), o, _dim(i - (i > dim)))
    out = parent.compose(proj)
    b = out.bases
    regs = [x for x in b.get(REGISTER, ()) if any(x)]
    return LinearLayout(
        [(d, regs if d == REGISTER else b[d]) for d in out.in_dims],
        [(o, out.out_dim_size(o)) for o in out.out_dims],
    ).transpose_outs([_dim(i) for i in range(rank - 1)])


# --------------------------------------------------------------------------------------
# Predicting the accumulator layout Triton picks for tl.dot.
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AccumulatorChoice:
    """The encoding Triton's AccelerateMatmul pass would give ``tl.dot``'s result.

    Kept as parameters (not just a layout) so diagnostics can name the encoding the
    user will see in TTGIR dumps."""

    kind: str  # "mma_v3" | "mma_v2" | "blocked"
    warps_per_cta: tuple[int, int]
    instr_shape: tuple[int, ...] = ()  # MMA only: (16, N, K) for v3, (16, 8) for v2
    size_per_thread: tuple[int, ...] = ()  # blocked only
    threads_per_warp: tuple[int, ...] = ()  # blocked only
    order: tuple[int, int] = (1, 0)
    layout: LinearLayout | None = None


# Valid wgmma N for 16/32-bit float operands, largest first (mmaVersionToInstrShape).
_WGMMA_VALID_N = tuple(range(256, 7, -8))


def _hopper_instr_n(bm: int, bn: int, num_warps: int) -> int:
    m_warps = max(bm // 16, 1)
    n_warps = max(num_warps // m_warps, 1)
    max_n = max(bn // n_warps, 8)
    for n in _WGMMA_VALID_N:
        if bn % n == 0 and n <= max_n:
            return n
    raise ValueError(f"no wgmma N fits BN={bn}")


def _hopper_warps(bm: int, num_warps: int, chained_dot: bool) -> tuple[int, int]:
    if chained_dot:
        return (num_warps, 1)
    w = [4, 1]
    while w[0] * w[1] < num_warps:
        if bm > 16 * w[0]:
            w[0] *= 2
        else:
            w[1] *= 2
    return (w[0], w[1])


def _ampere_warps(bm: int, bn: int, num_warps: int, chained_dot: bool) -> tuple[int, int]:
    if chained_dot:
        return (num_warps, 1) if bm >= bn else (1, num_warps)
    reps = [-(-bm // 16), -(-bn // 8)]
    w = [1, 1]
    while w[0] * w[1] < num_warps:
        if reps[0] >= reps[1]:
            w[0] *= 2
            if reps[0] != 1:
                reps[0] //= 2
        else:
            w[1] *= 2
            reps[1] //= 2
    return (w[0], w[1])


def _default_blocked_params(
    shape: Sequence[int], size_per_thread: Sequence[int], num_warps: int, threads_per_warp: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    # BlockedEncodingAttr::get(shape, sizePerThread, order=[rank-1..0], numWarps, ...):
    # fill lanes then warps from the minor dim, the major dim takes what is left.
    rank = len(shape)
    order = list(range(rank))[::-1]
    tpw = [1] * rank
    wpc = [1] * rank
    lanes_left = threads_per_warp
    threads_left = num_warps * threads_per_warp
    warps_left = num_warps
    prev_lanes = prev_warps = 1
    for d in range(rank - 1):
        i = order[d]
        threads = min(max(threads_left, 1), max(1, shape[i] // size_per_thread[i]))
        tpw[i] = min(max(threads, 1), lanes_left)
        wpc[i] = min(max(threads // tpw[i], 1), warps_left)
        warps_left //= wpc[i]
        lanes_left //= tpw[i]
        threads_left //= threads
        prev_lanes *= tpw[i]
        prev_warps *= wpc[i]
    tpw[order[-1]] = threads_per_warp // prev_lanes
    wpc[order[-1]] = num_warps // prev_warps
    return tuple(tpw), tuple(wpc)


def accumulator_encoding(
    bm: int,
    bn: int,
    num_warps: int,
    arch: str = "hopper",
    *,
    bk: int = 64,
    elem_bits: int = 16,
    chained_dot: bool = False,
    threads_per_warp: int = 32,
) -> AccumulatorChoice:
    """Predict the encoding of ``tl.dot``'s fp32 result for a BMxBN tile.

    Mirrors Triton 3.9 (checked against its ``convert_to_ttgpuir`` +
    ``accelerate_matmul`` passes in the tests):

    * ``hopper``: wgmma (MMAv3) when ``num_warps % 4 == 0``, ``BM % 64 == 0``,
      ``BN % 8 == 0`` and ``BK >= 256 / elem_bits`` (16/32-bit floats); otherwise the
      Ampere choice below.  Instr N is the largest valid N dividing BN and at most
      ``BN / max(num_warps / (BM/16), 1)``.  Warps start at [4,1] and double along M
      while ``BM > 16 * warps_m``, else along N: so 128x128 with 8 warps is [8,1], while
      64xN with 8 warps is [4,2].
    * ``ampere``: mma.sync m16n8, warps doubled on whichever of (BM/16, BN/8) has more
      repetitions left, ties to M.
    * ``blocked``: the FMA fallback (pre-Ampere or unsupported types): sizePerThread
      [4,4] when each thread holds >= 16 elements, [2,2] when >= 4, else [1,1], then the
      default blocked lane/warp split with order [1,0].

    ``chained_dot`` reproduces the flash-attention special case (result feeds another
    dot): all warps along M.  Only rank-2, single-CTA tiles are modelled.
    """
    if not (_is_pow2(bm) and _is_pow2(bn) and _is_pow2(num_warps)):
        raise ValueError("BM, BN and num_warps must be powers of two")
    shape = (bm, bn)
    if arch == "hopper":
        if (
            num_warps % 4 == 0
            and bm % 64 == 0
            and bn % 8 == 0
            and bk >= 256 // elem_bits
            and elem_bits in (8, 16, 32)
        ):
            n = _hopper_instr_n(bm, bn, num_warps)
            warps = _hopper_warps(bm, num_warps, chained_dot)
            return AccumulatorChoice(
                "mma_v3", warps, (16, n, 256 // elem_bits), layout=nvidia_mma_v3(shape, warps, n)
            )
        arch = "ampere"
    if arch == "ampere":
        warps = _ampere_warps(bm, bn, num_warps, chained_dot)
        return AccumulatorChoice("mma_v2", warps, (16, 8), layout=nvidia_mma_v2(shape, warps))
    if arch == "blocked":
        per_thread = (bm * bn) // (num_warps * threads_per_warp)
        s = 4 if per_thread >= 16 else 2 if per_thread >= 4 else 1
        spt = (min(s, bm), min(s, bn))
        tpw, wpc = _default_blocked_params(shape, spt, num_warps, threads_per_warp)
        return AccumulatorChoice(
            "blocked",
            (wpc[0], wpc[1]),
            size_per_thread=spt,
            threads_per_warp=(tpw[0], tpw[1]),
            order=(1, 0),
            layout=blocked(shape, spt, tpw, wpc, (1, 0)),
        )
    raise ValueError(f"unknown arch {arch!r} (expected 'hopper', 'ampere' or 'blocked')")


def accumulator_layout(
    bm: int,
    bn: int,
    num_warps: int,
    arch: str = "hopper",
    **kwargs: object,
) -> LinearLayout:
    """The linear layout of ``accumulator_encoding(...)`` (see there for assumptions)."""
    layout = accumulator_encoding(bm, bn, num_warps, arch, **kwargs).layout  # type: ignore[arg-type]
    assert layout is not None
    return layout


# --------------------------------------------------------------------------------------
# Locality levels and the two legality queries.
# --------------------------------------------------------------------------------------


class Level(enum.Enum):
    """Where data must travel; ordered THREAD < WARP < CTA < OUTSIDE."""

    THREAD = 0
    WARP = 1
    CTA = 2
    OUTSIDE = 3

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Level):
            return NotImplemented
        return self.value < other.value

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Level):
            return NotImplemented
        return self.value <= other.value

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Level):
            return NotImplemented
        return self.value > other.value

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Level):
            return NotImplemented
        return self.value >= other.value

    def describe(self) -> str:
        return {
            Level.THREAD: "thread-local: the data is already in the same thread's registers",
            Level.WARP: "warp-local: needs lane shuffles (shfl.bfly) inside one warp",
            Level.CTA: "CTA-local: needs a shared-memory exchange and a barrier across warps",
            Level.OUTSIDE: "outside the tile: the data is not held by this CTA",
        }[self]


# Which hardware dim crosses which boundary.  ``block`` (CTAs of a cluster) is OUTSIDE
# because an epilogue runs inside one CTA.
DEFAULT_DIM_LEVELS: dict[str, Level] = {
    REGISTER: Level.THREAD,
    LANE: Level.WARP,
    WARP: Level.CTA,
    BLOCK: Level.OUTSIDE,
}

_INNER_LEVELS = (Level.THREAD, Level.WARP, Level.CTA)


def _levels_of(layout: LinearLayout, levels: Mapping[str, Level] | None) -> dict[str, Level]:
    lv = dict(DEFAULT_DIM_LEVELS if levels is None else levels)
    for d in layout.in_dims:
        if d not in lv:
            raise ValueError(f"in-dim {d!r} has no locality level (known: {sorted(lv)})")
    return lv


def _cols_upto(layout: LinearLayout, lv: Mapping[str, Level], level: Level) -> list[int]:
    cols: list[int] = []
    for d in layout.in_dims:
        if lv[d] <= level:
            cols.extend(layout.columns[i] for i in layout.in_bit_range(d))
    return cols


def _axis_name(layout: LinearLayout, axis: int | str) -> str:
    name = axis if isinstance(axis, str) else _dim(axis)
    if not layout.has_out_dim(name):
        raise ValueError(f"layout has no out-dim {name!r} (has {list(layout.out_dims)})")
    return name


def _delta_flat(layout: LinearLayout, delta: Delta) -> int | None:
    """Flat XOR delta, or None when it leaves the layout's index space (not in the tile)."""
    d = dict(delta) if isinstance(delta, Mapping) else {_dim(i): v for i, v in enumerate(delta)}
    flat = 0
    for n, v in d.items():
        v = int(v)
        if v < 0:
            raise ValueError(f"delta {n}={v} is negative; XOR deltas are non-negative")
        if v == 0:
            continue
        if not layout.has_out_dim(n) or v >= layout.out_dim_size(n):
            return None
        flat |= v << layout._out_shift[n]
    return flat


def pair_hardware_delta(
    layout: LinearLayout, delta: Delta, *, levels: Mapping[str, Level] | None = None
) -> dict[str, int] | None:
    """The hardware XOR (per in-dim) that reaches the partner at the lowest level.

    Every holder h of element t finds ``t XOR delta`` at ``h XOR u``: the lane component
    of ``u`` is the ``shfl.bfly`` mask, the register component the register to read.
    None when the partner is outside the tile."""
    lv = _levels_of(layout, levels)
    flat = _delta_flat(layout, delta)
    if flat is None:
        return None
    for lvl in _INNER_LEVELS:
        # Earlier columns win ties (free variables at zero), so registers are preferred
        # over lanes when both could reach the partner.
        dims = [d for d in layout.in_dims if lv[d] <= lvl]
        cols: list[int] = []
        owners: list[tuple[str, int]] = []
        for d in dims:
            for k, i in enumerate(layout.in_bit_range(d)):
                cols.append(layout.columns[i])
                owners.append((d, k))
        mask = f2_solve(cols, flat)
        if mask is not None:
            u = {d: 0 for d in layout.in_dims}
            for j, (d, k) in enumerate(owners):
                if (mask >> j) & 1:
                    u[d] |= 1 << k
            return u
    return None


def pair_level(
    layout: LinearLayout, delta: Delta, *, levels: Mapping[str, Level] | None = None
) -> Level:
    """Where the partner ``t XOR delta`` of every element t of the tile lives.

    ``delta`` is ``{"dim1": 64}`` or a tuple ``(row_delta, col_delta)`` (index i is
    ``dim{i}``).  Linear, so the answer is the same for every element: the lowest level
    whose hardware bits span ``delta`` (with broadcast bases any preimage will do, i.e.
    the minimum over the coset).  OUTSIDE when ``delta`` leaves the tile's index space or
    its image (the partner belongs to another tile / CTA)."""
    lv = _levels_of(layout, levels)
    flat = _delta_flat(layout, delta)
    if flat is None:
        return Level.OUTSIDE
    e = _F2Echelon()
    for lvl in _INNER_LEVELS:
        for d in layout.in_dims:
            if lv[d] == lvl:
                for i in layout.in_bit_range(d):
                    e.add(layout.columns[i])
        if e.reduce(flat)[0] == 0:
            return lvl
    return Level.OUTSIDE


def pair_level_for_stride(
    layout: LinearLayout,
    axis: int | str,
    stride: int,
    *,
    levels: Mapping[str, Level] | None = None,
) -> Level:
    """Level for "index c pairs with c + stride inside aligned groups of 2*stride" along
    ``axis`` (RoPE rotate-half: stride = head_dim/2; SwiGLU halves: stride = F).

    For a power-of-two stride that is ``c XOR stride``.  When ``2*stride`` does not divide
    the tile extent, some group straddles a tile boundary, so the worst case is OUTSIDE.
    (Tile extents are powers of two, so in practice those two cases are all there is;
    the enumeration fallback keeps the function total if that ever changes.)"""
    if stride <= 0:
        raise ValueError("stride must be positive")
    name = _axis_name(layout, axis)
    extent = layout.out_dim_size(name)
    if extent % (2 * stride):
        return Level.OUTSIDE
    if _is_pow2(stride):
        return pair_level(layout, {name: stride}, levels=levels)
    return brute_pair_level_for_stride(layout, name, stride, levels=levels)


@dataclass(frozen=True)
class ReductionInfo:
    """How a reduction along one axis decomposes over the hardware.

    The bit counts are F2 dimensions of the reduced group: ``register_bits`` combined in
    registers, ``shuffle_rounds`` butterfly-shuffle steps, ``warp_bits`` combined across
    warps through shared memory, ``block_bits`` needing other CTAs.  Cost model:
    rounds x shuffle latency, plus a smem scratch of 2**warp_bits partials per row and a
    barrier when ``warp_bits`` > 0."""

    level: Level
    register_bits: int
    shuffle_rounds: int
    warp_bits: int
    block_bits: int = 0

    @property
    def total_bits(self) -> int:
        return self.register_bits + self.shuffle_rounds + self.warp_bits + self.block_bits


def _segment_mask(layout: LinearLayout, name: str, segment: int | None) -> int | None:
    extent = layout.out_dim_size(name)
    seg = extent if segment is None else segment
    if seg <= 0:
        raise ValueError("segment must be positive")
    if seg > extent or extent % seg or not _is_pow2(seg):
        return None
    return (seg - 1) << layout._out_shift[name]


def reduction_info(
    layout: LinearLayout,
    axis: int | str,
    *,
    segment: int | None = None,
    levels: Mapping[str, Level] | None = None,
) -> ReductionInfo:
    """Decompose a reduction along ``axis`` (1 or "dim1": over columns, one result per
    row; 0: over rows) into register / shuffle / cross-warp steps.

    ``segment`` reduces aligned groups of that many indices instead of the whole tile
    extent (per-head QK-norm: segment = head_dim).  A segment larger than the tile, or one
    that does not tile it, needs other tiles: OUTSIDE with zero counts."""
    lv = _levels_of(layout, levels)
    name = _axis_name(layout, axis)
    seg = _segment_mask(layout, name, segment)
    if seg is None:
        return ReductionInfo(Level.OUTSIDE, 0, 0, 0, 0)
    axis_units = [1 << b for b in range(seg.bit_length()) if (seg >> b) & 1]
    total = f2_intersection_dim(layout.columns, axis_units)
    dims = []
    for lvl in _INNER_LEVELS:
        dims.append(f2_intersection_dim(_cols_upto(layout, lv, lvl), axis_units))
    level = next((lvl for lvl, d in zip(_INNER_LEVELS, dims) if d == total), Level.OUTSIDE)
    return ReductionInfo(
        level=level,
        register_bits=dims[0],
        shuffle_rounds=dims[1] - dims[0],
        warp_bits=dims[2] - dims[1],
        block_bits=total - dims[2],
    )


def reduction_level(
    layout: LinearLayout,
    axis: int | str,
    *,
    segment: int | None = None,
    levels: Mapping[str, Level] | None = None,
) -> Level:
    """Level at which a reduction along ``axis`` completes (see ``reduction_info``)."""
    return reduction_info(layout, axis, segment=segment, levels=levels).level


# --------------------------------------------------------------------------------------
# Index permutations as F2 maps (weight-column interleaves).
# --------------------------------------------------------------------------------------


def bit_permutation_layout(size: int, perm: Sequence[int], dim: str = "dim1") -> LinearLayout:
    """Index bit ``i`` moves to bit ``perm[i]``: a relabelling of the columns that the
    legalizer can apply to the weight once and then reason about linearly."""
    n = _log2(size)
    if sorted(perm) != list(range(n)):
        raise ValueError(f"{list(perm)} is not a permutation of the {n} index bits")
    return LinearLayout([(dim, [[1 << p] for p in perm])], [(dim, size)])


def interleave_layout(size: int, half_bit: int, to_bit: int = 0, dim: str = "dim1") -> LinearLayout:
    """The interleave that brings the two halves selected by index bit ``half_bit`` next
    to each other at granularity ``2**to_bit``.

    ``[g | u]`` with F columns each (half_bit = log2 F, to_bit = 0) becomes
    ``[g0 u0 g1 u1 ...]``: the SwiGLU pair moves from distance F to distance 1.  Bits
    between ``to_bit`` and ``half_bit`` shift up by one; bits above ``half_bit`` (e.g.
    which head) are untouched, so per-head RoPE rotate-half uses
    ``half_bit = log2(head_dim) - 1``."""
    n = _log2(size)
    if not 0 <= to_bit <= half_bit < n:
        raise ValueError(f"need 0 <= to_bit <= half_bit < {n}")
    perm = []
    for i in range(n):
        if i == half_bit:
            perm.append(to_bit)
        elif to_bit <= i < half_bit:
            perm.append(i + 1)
        else:
            perm.append(i)
    return bit_permutation_layout(size, perm, dim)


def permutation_layout(
    size: int, perm: Callable[[int], int] | Sequence[int], dim: str = "dim1"
) -> LinearLayout:
    """An arbitrary index permutation, accepted only if it is linear over F2.

    Non-linear permutations (e.g. for a non-power-of-two head dim) cannot be reasoned
    about with ``pair_level``; rejecting them here forces the caller to the brute-force
    path instead of getting a silently wrong answer."""
    n = _log2(size)
    f = perm if callable(perm) else (lambda i, t=tuple(perm): t[i])
    lay = LinearLayout([(dim, [[f(1 << i)] for i in range(n)])], [(dim, size)])
    seen = set()
    for i in range(size):
        img = f(i)
        if lay.apply({dim: i})[dim] != img:
            raise ValueError(f"permutation is not F2-linear (index {i} -> {img})")
        seen.add(img)
    if len(seen) != size:
        raise ValueError("not a permutation")
    return lay


def permute_delta(perm: LinearLayout, delta: Delta) -> dict[str, int]:
    """``P(delta)``: the XOR distance of a pair after the index permutation ``perm``.

    ``perm``'s in-dims are tensor dims (like ``"dim1"``); dims it does not mention pass
    through.  Because P is linear, ``P(t) XOR P(t XOR delta) == P(delta)`` for every t,
    so ``pair_level(layout, permute_delta(P, delta))`` is the question "after
    permuting, where is the partner"."""
    d = dict(delta) if isinstance(delta, Mapping) else {_dim(i): v for i, v in enumerate(delta)}
    inside = {k: v for k, v in d.items() if perm.has_in_dim(k)}
    out = {k: v for k, v in d.items() if not perm.has_in_dim(k)}
    for k, v in inside.items():
        if v >= perm.in_dim_size(k):
            raise ValueError(f"delta {k}={v} is outside the permutation's size {perm.in_dim_size(k)}")
    img = perm.apply(inside)
    for k, v in img.items():
        out[k] = out.get(k, 0) ^ v
    return out


# --------------------------------------------------------------------------------------
# Brute-force oracles: enumerate every hardware point (tests, and non-linear cases).
# --------------------------------------------------------------------------------------


def _level_masks(layout: LinearLayout, lv: Mapping[str, Level]) -> list[tuple[Level, int]]:
    # For each inner level, the in-bits that must agree for two points to share a unit
    # (same thread / warp / CTA).
    res = []
    for lvl in _INNER_LEVELS:
        m = 0
        for d in layout.in_dims:
            if lv[d] > lvl:
                for i in layout.in_bit_range(d):
                    m |= 1 << i
        res.append((lvl, m))
    return res


def _pair_level_between(x: int, y: int, masks: Sequence[tuple[Level, int]]) -> Level:
    diff = x ^ y
    for lvl, m in masks:
        if diff & m == 0:
            return lvl
    return Level.OUTSIDE


def brute_pair_level_map(
    layout: LinearLayout,
    partner: Callable[[dict[str, int]], Mapping[str, int] | None],
    *,
    levels: Mapping[str, Level] | None = None,
) -> Level:
    """Worst level, over every hardware point, at which the nearest holder of
    ``partner(index)`` sits (``partner`` returns None for "not in this tile")."""
    lv = _levels_of(layout, levels)
    masks = _level_masks(layout, lv)
    outs = list(layout.image_points())
    holders: dict[int, list[int]] = {}
    for x, t in enumerate(outs):
        holders.setdefault(t, []).append(x)
    worst = Level.THREAD
    memo: dict[int, int | None] = {}
    for x, t in enumerate(outs):
        if t not in memo:
            p = partner(layout.unflatten_out(t))
            if p is None:
                memo[t] = None
            else:
                try:
                    memo[t] = layout.flatten_out(p)
                except (KeyError, ValueError):
                    memo[t] = None
        p_flat = memo[t]
        if p_flat is None or p_flat not in holders:
            return Level.OUTSIDE
        best = min(_pair_level_between(x, y, masks) for y in holders[p_flat])
        if best > worst:
            worst = best
            if worst is Level.OUTSIDE:
                return worst
    return worst


def brute_pair_level(
    layout: LinearLayout, delta: Delta, *, levels: Mapping[str, Level] | None = None
) -> Level:
    """Enumeration oracle for ``pair_level``."""
    flat = _delta_flat(layout, delta)
    if flat is None:
        _levels_of(layout, levels)
        return Level.OUTSIDE
    d = layout.unflatten_out(flat)
    return brute_pair_level_map(
        layout, lambda t: {k: v ^ d[k] for k, v in t.items()}, levels=levels
    )


def brute_pair_level_for_stride(
    layout: LinearLayout,
    axis: int | str,
    stride: int,
    *,
    levels: Mapping[str, Level] | None = None,
) -> Level:
    """Enumeration oracle for ``pair_level_for_stride`` (any stride)."""
    name = _axis_name(layout, axis)
    extent = layout.out_dim_size(name)
    if extent % (2 * stride):
        return Level.OUTSIDE

    def partner(t: dict[str, int]) -> dict[str, int] | None:
        c = t[name]
        p = c + stride if (c // stride) % 2 == 0 else c - stride
        if not 0 <= p < extent:
            return None
        return {**t, name: p}

    return brute_pair_level_map(layout, partner, levels=levels)


def brute_reduction_info(
    layout: LinearLayout,
    axis: int | str,
    *,
    segment: int | None = None,
    levels: Mapping[str, Level] | None = None,
) -> ReductionInfo:
    """Enumeration oracle for ``reduction_info``: for every hardware point, count the
    distinct members of its reduction group held in the same thread / warp / CTA; the
    worst point decides."""
    lv = _levels_of(layout, levels)
    name = _axis_name(layout, axis)
    seg = _segment_mask(layout, name, segment)
    if seg is None:
        return ReductionInfo(Level.OUTSIDE, 0, 0, 0, 0)
    masks = _level_masks(layout, lv)
    outs = list(layout.image_points())
    group_of: dict[int, set[int]] = {}
    for t in outs:
        group_of.setdefault(t & ~seg, set()).add(t)
    held: list[dict[tuple[int, int], set[int]]] = [{} for _ in masks]
    for x, t in enumerate(outs):
        for k, (_, m) in enumerate(masks):
            held[k].setdefault((x & m, t & ~seg), set()).add(t)
    worst_level = Level.THREAD
    counts = None
    for x, t in enumerate(outs):
        g = len(group_of[t & ~seg])
        sizes = [len(held[k][(x & m, t & ~seg)]) for k, (_, m) in enumerate(masks)]
        level = next((lvl for (lvl, _), s in zip(masks, sizes) if s == g), Level.OUTSIDE)
        bits = [s.bit_length() - 1 for s in sizes] + [g.bit_length() - 1]
        if counts is None or level > worst_level or (level == worst_level and bits < counts):
            worst_level, counts = level, bits
    assert counts is not None
    return ReductionInfo(
        level=worst_level,
        register_bits=counts[0],
        shuffle_rounds=counts[1] - counts[0],
        warp_bits=counts[2] - counts[1],
        block_bits=counts[3] - counts[2],
    )


def brute_reduction_level(
    layout: LinearLayout,
    axis: int | str,
    *,
    segment: int | None = None,
    levels: Mapping[str, Level] | None = None,
) -> Level:
    return brute_reduction_info(layout, axis, segment=segment, levels=levels).level
