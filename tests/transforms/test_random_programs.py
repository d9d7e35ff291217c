"""Random nn programs (seeded DAGs of every op) through the default pipeline and the baseline:
whatever fuses, the numbers must match the float64 reference under the NN_DIALECT.md bar."""

from __future__ import annotations

import os
import random

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: F401

import coda_ir
from coda_ir import testing

M_CHOICES = (7, 16, 33)


class Gen:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.m = self.rng.choice(M_CHOICES)
        self.args: list[str] = []
        self.lines: list[str] = []
        self.values: list[tuple[str, int]] = []  # (name, width) of [M, width] f32 values
        self.n = 0

    def fresh(self) -> str:
        self.n += 1
        return f"%v{self.n}"

    def arg(self, shape: str, prefix: str = "a") -> str:
        name = f"%{prefix}{len(self.args)}"
        self.args.append(f"{name}: tensor<{shape}>")
        return name

    def t(self, w: int) -> str:
        return f"tensor<{self.m}x{w}xf32>"

    def op(self, text: str, w: int) -> str:
        v = self.fresh()
        self.lines.append(f"  {v} = {text}")
        self.values.append((v, w))
        return v

    def pick(self, w: int | None = None) -> tuple[str, int]:
        pool = [v for v in self.values if w is None or v[1] == w]
        return self.rng.choice(pool[-3:]) if pool else self.values[-1]

    def step(self) -> None:
        x, w = self.pick()
        choice = self.rng.choice(
            ["linear", "linear", "linear", "add", "bias", "mul", "act", "rms", "ln", "swiglu", "rope", "qknorm"]
        )
        t = self.t(w)
        if choice == "linear":
            n = self.rng.choice((32, 64, 128))
            wt = self.arg(f"{n}x{w}xf32", "w")
            self.op(f'"nn.linear"({x}, {wt}) : ({t}, tensor<{n}x{w}xf32>) -> {self.t(n)}', n)
        elif choice == "add":
            y, _ = self.pick(w)
            if y == x:
                y = self.arg(f"{self.m}x{w}xf32", "r")
            self.op(f'"nn.add"({y}, {x}) : ({t}, {t}) -> {t}', w)
        elif choice == "bias":
            b = self.arg(f"{w}xf32", "b")
            self.op(f'"nn.add"({x}, {b}) : ({t}, tensor<{w}xf32>) -> {t}', w)
        elif choice == "mul":
            g = self.arg(f"{w}xf32", "g")
            self.op(f'"nn.mul"({x}, {g}) : ({t}, tensor<{w}xf32>) -> {t}', w)
        elif choice == "act":
            kind = self.rng.choice(['"nn.silu"', '"nn.relu"', '"nn.gelu"'])
            props = ' <{approximate = "tanh"}>' if kind == '"nn.gelu"' else ""
            self.op(f"{kind}({x}){props} : ({t}) -> {t}", w)
        elif choice in ("rms", "ln"):
            g = self.arg(f"{w}xf32", "g")
            if choice == "rms":
                self.op(f'"nn.rms_norm"({x}, {g}) <{{eps = 1.0e-06 : f32}}> : ({t}, tensor<{w}xf32>) -> {t}', w)
            else:
                b = self.arg(f"{w}xf32", "b")
                self.op(
                    f'"nn.layer_norm"({x}, {g}, {b}) <{{eps = 1.0e-05 : f32}}> : ({t}, tensor<{w}xf32>, tensor<{w}xf32>) -> {t}',
                    w,
                )
        elif choice == "swiglu" and w >= 64:
            self.op(f'"nn.swiglu"({x}) : ({t}) -> {self.t(w // 2)}', w // 2)
        elif choice == "rope":
            pos = self.arg(f"{self.m}xi32", "pos")
            style = self.rng.choice(["half", "interleaved"])
            heads = self.rng.randint(0, w // 16)
            self.op(
                f'"nn.rope"({x}, {pos}) <{{head_dim = 16 : i64, rotary_heads = {heads} : i64, theta = 10000.0 : f32, style = "{style}"}}> : ({t}, tensor<{self.m}xi32>) -> {t}',
                w,
            )
        elif choice == "qknorm":
            g = self.arg("16xf32", "g")
            heads = self.rng.randint(0, w // 16)
            self.op(
                f'"nn.head_rms_norm"({x}, {g}) <{{head_dim = 16 : i64, heads = {heads} : i64, eps = 1.0e-06 : f32}}> : ({t}, tensor<16xf32>) -> {t}',
                w,
            )

    def program(self) -> str:
        x0 = self.arg(f"{self.m}x64xf32", "x")
        self.values.append((x0, 64))
        for _ in range(self.rng.randint(3, 8)):
            self.step()
        outs = [self.values[-1]]
        if self.rng.random() < 0.5 and len(self.values) > 3:
            outs.append(self.values[len(self.values) // 2])
        results = [(v, f"tensor<{self.m}x{w}xf32>") for v, w in outs]
        if self.rng.random() < 0.3:
            v, w = outs[0]
            tg = self.arg(f"{self.m}xi32", "targets")
            loss = self.fresh()
            self.lines.append(
                f'  {loss} = "nn.cross_entropy"({v}, {tg}) <{{ignore_index = -100 : i64, reduction = "sum"}}> : ({self.t(w)}, tensor<{self.m}xi32>) -> tensor<f32>'
            )
            results.append((loss, "tensor<f32>"))
        sig = ", ".join(ty for _, ty in results)
        body = "\n".join(self.lines)
        rets = ", ".join(v for v, _ in results)
        return (
            f"func.func @random({', '.join(self.args)}) -> ({sig}) {{\n{body}\n"
            f"  func.return {rets} : {sig}\n}}\n"
        )


@pytest.mark.parametrize("pipeline", ["nn-to-coda", "convert-nn-to-coda"])
@pytest.mark.parametrize("seed", range(int(os.environ.get("CODA_RANDOM_PROGRAMS", "12"))))
def test_random_program(seed: int, pipeline: str):
    source = Gen(seed).program()
    compiled = coda_ir.compile(source, pipeline=pipeline)
    inputs = testing.random_inputs(source, seed=seed)
    outputs = compiled.random(*inputs)
    try:
        testing.check_against_reference(source, inputs, outputs)
    except AssertionError as error:
        raise AssertionError(f"{error}\n\nprogram:\n{source}") from None
