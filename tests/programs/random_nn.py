"""Random nn programs with every op at odd widths, for the numerics fuzzer
(tests/test_fuzz_numerics.py) and the error fuzzer's mutation seeds.

`build(choose)` writes one program in the generic form of NN_DIALECT.md. Every random decision
goes through `choose` (a `Chooser`), so the same builder runs under hypothesis (which then
shrinks a failing program to a small one) or under a seeded `random.Random` (`RandomChooser`).

What it draws: M rows (odd and small: 1 .. 67), the element type (f32, f16, bf16), a start that is
an argument or an embedding lookup, then 2 .. 8 steps, each one op applied to a recent value:
linear and matmul to widths no power-of-two tile holds (24 .. 200, odd ones too), add and mul
with a full operand or a rank-1 bias/scale, silu, relu, gelu and geglu (both approximations),
swiglu, rms_norm, layer_norm, rope (both styles, any number of rotary heads, head_dim 4 .. 80),
head_rms_norm (any first_head, head_dim 3 .. 80), concat and slice along columns; the results
are the last value, sometimes an earlier one, sometimes a cross-entropy loss (mean or sum,
ignore_index -100 or a real class, so ignored rows are hit) of a value.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Protocol, Sequence, TypeVar

X = TypeVar("X")

ROWS = (1, 5, 7, 19, 33, 45, 67)
START_WIDTHS = (24, 36, 40, 48, 45, 80, 96)
# GEMM output widths: not multiples of 16 (one is, as a control), odd ones, and 200 (two tiles)
GEMM_WIDTHS = (24, 27, 40, 48, 64, 72, 80, 96, 120, 200)
ROPE_HEAD_DIMS = (4, 8, 12, 16, 24, 32, 40, 48, 80)
HEAD_NORM_DIMS = (3, 5, 8, 9, 12, 15, 16, 24, 32, 40, 48, 80)
DTYPES = ("f32", "f16", "bf16")
STEPS = ("linear", "matmul", "add", "bias", "mul", "scale", "silu", "relu", "gelu", "rms_norm", "layer_norm",
         "swiglu", "geglu", "rope", "head_rms_norm", "concat", "slice")


class Chooser(Protocol):
    def choice(self, options: Sequence[X]) -> X: ...

    def integer(self, lo: int, hi: int) -> int: ...  # lo <= n <= hi


class RandomChooser:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def choice(self, options):
        return self.rng.choice(list(options))

    def integer(self, lo, hi):
        return self.rng.randint(lo, hi)


def power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@dataclass
class Program:
    source: str
    dtype: str
    rows: int
    ops: set[str] = field(default_factory=set)  # op names and variants used, e.g. "rope:interleaved"
    head_norm_dims: set[int] = field(default_factory=set)  # head_dim of every head_rms_norm that normalizes a head
    has_loss: bool = False

    def __str__(self) -> str:  # what hypothesis prints for a failing example
        return self.source


class Builder:
    def __init__(self, choose: Chooser):
        self.c = choose
        self.m = choose.choice(ROWS)
        self.dt = choose.choice(DTYPES)
        self.args: list[str] = []
        self.lines: list[str] = []
        self.values: list[tuple[str, int]] = []  # [M, width] values of the program's element type
        self.ops: set[str] = set()
        self.head_norm_dims: set[int] = set()
        self.n = 0

    def t(self, *shape: int, dt: str | None = None) -> str:
        return "tensor<" + "".join(f"{d}x" for d in shape) + (dt or self.dt) + ">"

    def arg(self, ty: str, prefix: str) -> str:
        name = f"%{prefix}{len(self.args)}"
        self.args.append(f"{name}: {ty}")
        return name

    def op(self, kind: str, text: str, width: int) -> str:
        self.n += 1
        v = f"%v{self.n}"
        self.lines.append(f"  {v} = {text}")
        self.values.append((v, width))
        self.ops.add(kind)
        return v

    def recent(self, width: int | None = None) -> tuple[str, int]:
        pool = [v for v in self.values if width is None or v[1] == width][-4:]
        return self.c.choice(pool) if pool else self.values[-1]

    def start(self) -> None:
        d = self.c.choice(START_WIDTHS)
        if self.c.integer(0, 3) == 0:  # token ids through an embedding table
            v = self.c.choice((11, 50))
            ids = self.arg(self.t(self.m, dt="i32"), "ids")
            w = self.arg(self.t(v, d), "emb")
            self.op("embedding", f'"nn.embedding"({ids}, {w}) : ({self.t(self.m, dt="i32")}, {self.t(v, d)}) -> {self.t(self.m, d)}', d)
        else:
            self.values.append((self.arg(self.t(self.m, d), "x"), d))

    def step(self) -> None:
        kind = self.c.choice(STEPS)
        x, w = self.recent()
        t, m = self.t(self.m, w), self.m
        if kind == "linear":
            n = self.c.choice(GEMM_WIDTHS)
            wt = self.arg(self.t(n, w), "w")
            self.op(kind, f'"nn.linear"({x}, {wt}) : ({t}, {self.t(n, w)}) -> {self.t(m, n)}', n)
        elif kind == "matmul":
            n = self.c.choice(GEMM_WIDTHS)
            b = self.arg(self.t(w, n), "wm")
            self.op(kind, f'"nn.matmul"({x}, {b}) : ({t}, {self.t(w, n)}) -> {self.t(m, n)}', n)
        elif kind in ("add", "mul"):
            y, _ = self.recent(w)
            if y == x and self.c.integer(0, 1):
                y = self.arg(t, "r")
            a, b = (x, y) if self.c.integer(0, 1) else (y, x)
            self.op(kind, f'"nn.{kind}"({a}, {b}) : ({t}, {t}) -> {t}', w)
        elif kind in ("bias", "scale"):
            b = self.arg(self.t(w), "b" if kind == "bias" else "g")
            name = "add" if kind == "bias" else "mul"
            self.op(f"{name}:vector", f'"nn.{name}"({x}, {b}) : ({t}, {self.t(w)}) -> {t}', w)
        elif kind in ("silu", "relu"):
            self.op(kind, f'"nn.{kind}"({x}) : ({t}) -> {t}', w)
        elif kind == "gelu":
            approx = self.c.choice(("none", "tanh"))
            self.op(f"gelu:{approx}", f'"nn.gelu"({x}) <{{approximate = "{approx}"}}> : ({t}) -> {t}', w)
        elif kind == "rms_norm":
            g = self.arg(self.t(w), "g")
            self.op(kind, f'"nn.rms_norm"({x}, {g}) <{{eps = 1.0e-06 : f32}}> : ({t}, {self.t(w)}) -> {t}', w)
        elif kind == "layer_norm":
            g, b = self.arg(self.t(w), "g"), self.arg(self.t(w), "b")
            self.op(kind, f'"nn.layer_norm"({x}, {g}, {b}) <{{eps = 1.0e-05 : f32}}> : ({t}, {self.t(w)}, {self.t(w)}) -> {t}', w)
        elif kind in ("swiglu", "geglu"):
            if w % 2:  # the gated ops need [gate | up] halves: project to an even width first
                f = self.c.choice((12, 20, 24, 40, 48, 100))
                wt = self.arg(self.t(2 * f, w), "w")
                x = self.op("linear", f'"nn.linear"({x}, {wt}) : ({t}, {self.t(2 * f, w)}) -> {self.t(m, 2 * f)}', 2 * f)
                w, t = 2 * f, self.t(m, 2 * f)
            props, variant = "", kind
            if kind == "geglu":
                approx = self.c.choice(("none", "tanh"))
                props, variant = f' <{{approximate = "{approx}"}}>', f"geglu:{approx}"
            self.op(variant, f'"nn.{kind}"({x}){props} : ({t}) -> {self.t(m, w // 2)}', w // 2)
        elif kind == "rope":
            dims = [hd for hd in ROPE_HEAD_DIMS if w % hd == 0]
            if not dims:
                return
            hd = self.c.choice(dims)
            heads = self.c.integer(0, w // hd)
            style = self.c.choice(("half", "interleaved"))
            theta = self.c.choice(("10000.0", "500000.0"))
            pos = self.arg(self.t(m, dt="i32"), "pos")
            partial = ":partial" if 0 < heads < w // hd else ""
            self.op(f"rope:{style}{partial}",
                    f'"nn.rope"({x}, {pos}) <{{head_dim = {hd} : i64, rotary_heads = {heads} : i64, theta = {theta} : f32, style = "{style}"}}> : ({t}, {self.t(m, dt="i32")}) -> {t}', w)
        elif kind == "head_rms_norm":
            dims = [hd for hd in HEAD_NORM_DIMS if w % hd == 0]
            if not dims:
                return
            hd = self.c.choice(dims)
            first = self.c.integer(0, w // hd - 1)
            heads = self.c.integer(0, w // hd - first)
            g = self.arg(self.t(hd), "gq")
            props = f"head_dim = {hd} : i64, heads = {heads} : i64, eps = 1.0e-06 : f32"
            if first:
                props += f", first_head = {first} : i64"
            if heads:
                self.head_norm_dims.add(hd)
            self.op("head_rms_norm:first_head" if first else "head_rms_norm",
                    f'"nn.head_rms_norm"({x}, {g}) <{{{props}}}> : ({t}, {self.t(hd)}) -> {t}', w)
        elif kind == "concat":
            y, wy = self.recent()
            if self.c.integer(0, 2) == 0:
                y, wy = self.arg(self.t(m, w), "c"), w
            self.op(kind, f'"nn.concat"({x}, {y}) <{{axis = 1 : i64}}> : ({t}, {self.t(m, wy)}) -> {self.t(m, w + wy)}', w + wy)
        elif kind == "slice":
            if w < 2:
                return
            size = self.c.integer(1, w - 1)
            start = self.c.integer(0, w - size)
            self.op(kind, f'"nn.slice"({x}) <{{axis = 1 : i64, start = {start} : i64}}> : ({t}) -> {self.t(m, size)}', size)

    def build(self) -> Program:
        self.start()
        for _ in range(self.c.integer(2, 8)):
            self.step()
        outs = [self.values[-1]]
        if len(self.values) > 2 and self.c.integer(0, 2) == 0:
            earlier = self.c.choice(self.values[1:-1])
            if earlier not in outs:
                outs.append(earlier)
        results = [(v, self.t(self.m, w)) for v, w in outs]
        has_loss = self.c.integer(0, 2) == 0
        if has_loss:
            v, w = self.recent()
            ignore = self.c.choice((-100, 0, w - 1))  # a real class: rows with that target are ignored
            reduction = self.c.choice(("mean", "sum"))
            tg = self.arg(self.t(self.m, dt="i32"), "targets")
            loss = f"%loss{self.n}"
            self.lines.append(
                f'  {loss} = "nn.cross_entropy"({v}, {tg}) <{{ignore_index = {ignore} : i64, reduction = "{reduction}"}}>'
                f' : ({self.t(self.m, w)}, {self.t(self.m, dt="i32")}) -> tensor<f32>'
            )
            self.ops.add(f"cross_entropy:{reduction}")
            results.append((loss, "tensor<f32>"))
        sig = ", ".join(ty for _, ty in results)
        source = (
            f"func.func @f({', '.join(self.args)}) -> ({sig}) {{\n" + "\n".join(self.lines) + "\n"
            f"  func.return {', '.join(v for v, _ in results)} : {sig}\n}}\n"
        )
        return Program(source, self.dt, self.m, self.ops, self.head_norm_dims, has_loss)


def build(choose: Chooser) -> Program:
    return Builder(choose).build()


class _Draws:
    """A `Chooser` over hypothesis' `draw`: hypothesis records (and shrinks) every choice."""

    def __init__(self, draw):
        from hypothesis import strategies as st

        self.draw, self.st = draw, st

    def choice(self, options):
        return self.draw(self.st.sampled_from(list(options)))

    def integer(self, lo, hi):
        return self.draw(self.st.integers(lo, hi))


def programs():
    """The hypothesis strategy of random programs (a `Program`)."""
    from hypothesis import strategies as st

    return st.composite(lambda draw: build(_Draws(draw)))()
