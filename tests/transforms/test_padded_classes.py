"""`nn.cross_entropy {classes}`: an LM head padded to an aligned width (from_hf pads an odd
vocabulary, Granite's 49155, so that the logits' rows are 16-byte aligned) whose columns past
`classes` are padding.

The padded program (zero weight rows appended, `classes` = the real vocabulary) compiled through
each backward form (stored logits, the soft-capped head's single-tensor backward, logits
recomputed in chunks) gives the unpadded program's loss and gradients against its float64
reference, and exactly zero gradient in the padding rows; a target that names a padding column
is refused at run time like any target past the vocabulary.
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

import coda_ir  # noqa: E402
from coda_ir import reference, testing  # noqa: E402
from coda_ir.errors import ArgumentError  # noqa: E402

M, D, C, V = 37, 48, 71, 80  # 71 classes padded to 80 columns


def head(width: int, dtype: str, classes: int | None, softcap: bool) -> str:
    T = lambda *s: "tensor<" + "x".join(map(str, s)) + f"x{dtype}>"  # noqa: E731
    cap = (f'  %c = "nn.softcap"(%s) <{{cap = 3.0 : f32}}> : ({T(M, width)}) -> {T(M, width)}\n' if softcap else "")
    logits = "%c" if softcap else "%s"
    props = '{ignore_index = -100 : i64, reduction = "mean"' + (f", classes = {classes} : i64" if classes else "") + "}"
    return (f"func.func @head(%h: {T(M, D)}, %w: {T(width, D)}, %t: tensor<{M}xi32>) -> tensor<f32> {{\n"
            f'  %z = "nn.linear"(%h, %w) : ({T(M, D)}, {T(width, D)}) -> {T(M, width)}\n'
            f'  %s = "nn.scale"(%z) <{{factor = 0.5 : f32}}> : ({T(M, width)}) -> {T(M, width)}\n'
            f"{cap}"
            f'  %l = "nn.cross_entropy"({logits}, %t) <{props}> : ({T(M, width)}, tensor<{M}xi32>) -> tensor<f32>\n'
            f"  func.return %l : tensor<f32>\n}}")


def inputs(seed: int, dtype: torch.dtype):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(M, D, generator=g).to(dtype)
    w = (0.2 * torch.randn(C, D, generator=g)).to(dtype)
    t = torch.randint(0, C, (M,), generator=g, dtype=torch.int32)
    t[::5] = -100
    return h, w, t


@pytest.mark.parametrize("form", ["stored", "softcap", "chunked"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_padded_head_gives_the_unpadded_loss_and_gradients(form: str, dtype: str):
    torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
    softcap = form == "softcap"
    padded, plain = head(V, dtype, C, softcap), head(C, dtype, None, softcap)
    autodiff = "nn-autodiff{logits-chunk=32}" if form == "chunked" else "nn-autodiff"
    compiled = coda_ir.compile(padded, pipeline=f"{autodiff},nn-to-coda")
    h, w, t = inputs(7, torch_dtype)
    w_padded = torch.nn.functional.pad(w, (0, 0, 0, V - C))  # zero rows: the padding
    loss, *saved = compiled.head_fwd(h, w_padded, t)
    dh, dw = compiled.head_bwd(*saved, torch.ones((), dtype=torch.float32))
    assert torch.equal(dw[C:], torch.zeros_like(dw[C:]))  # no gradient reaches the padding rows
    # against the unpadded program's references (float64 and its own element type)
    ref64, ref_t = reference.reference_pair(plain, [h, w, t])
    g64, g_t = testing.reference_gradients(plain, [h, w, t], [torch.ones((), dtype=torch.float32)])
    testing.assert_matches([loss, dh, dw[:C]], [*ref64, *g64], [*ref_t, *g_t], ["loss", "dh", "dw"],
                           loss=(torch_dtype, M))
    if form == "chunked":
        assert "linear_cross_entropy_grad" in str(coda_ir.lower(coda_ir.parse(padded), autodiff))


def test_a_target_in_the_padding_is_refused():
    compiled = coda_ir.compile(head(V, "f32", C, False), pipeline="nn-autodiff,nn-to-coda")
    h, w, t = inputs(3, torch.float32)
    t[4] = C + 2  # a padding column, inside the logits' width
    with pytest.raises(ArgumentError, match=rf"holds {C + 2} at row 4, expected targets in \[0, {C}\)"):
        compiled.head_fwd(h, torch.nn.functional.pad(w, (0, 0, 0, V - C)), t)
