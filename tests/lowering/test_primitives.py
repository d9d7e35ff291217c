"""Every coda primitive, one small kernel each, through the Triton interpreter against a float64
reference computed op by op (the coda interpreter, coda_ir.interpreters), with the numerics bar of
NN_DIALECT.md (coda_ir.testing.check_close).

Shapes are small and odd (M, N, K not multiples of the 32-wide interpreter tiles) so ragged
edges are exercised; dtypes bf16 / f16 / f32; transposed operands; interleaved columns.
"""

from __future__ import annotations

import pytest
import torch

from .helpers import check, fold_partials

M, N, K = 37, 48, 40


def gemm_program(
    epilogue: str,
    ins: list[tuple[str, str]] = (),
    results: list[str] = ("tensor<{M}x{N}x{T}>",),
    *,
    dt: str = "bf16",
    ta: bool = False,
    tb: bool = False,
    interleave: int = 0,
    m: int = M,
    n: int = N,
    k: int = K,
) -> str:
    """A one-kernel function `@f(%a, %b, ins...)`; the epilogue sees %acc and the ins by name."""
    fmt = dict(M=m, N=n, K=k, T=dt)
    a_ty = f"tensor<{k}x{m}x{dt}>" if ta else f"tensor<{m}x{k}x{dt}>"
    b_ty = f"tensor<{n}x{k}x{dt}>" if tb else f"tensor<{k}x{n}x{dt}>"
    ins = [(name, ty.format(**fmt)) for name, ty in ins]
    results = [r.format(**fmt) for r in results]
    args = ", ".join([f"%a: {a_ty}", f"%b: {b_ty}", *[f"%{nm}_in: {ty}" for nm, ty in ins]])
    flags = (" transpose_a" if ta else "") + (" transpose_b" if tb else "") + (f" interleave {interleave}" if interleave else "")
    ins_clause = ""
    if ins:
        ins_clause = f" ins({', '.join(f'%{nm}_in' for nm, _ in ins)} : {', '.join(ty for _, ty in ins)})"
    block_args = ", ".join([f"%acc: !coda.tile<{m}x{n}xf32>", *[f"%{nm}: {ty}" for nm, ty in ins]])
    rtypes = ", ".join(results)
    body = epilogue.format(**fmt)
    return f"""
func.func @f({args}) -> ({rtypes}) {{
  %r:{len(results)} = coda.gemm %a, %b{flags}{ins_clause} : {a_ty}, {b_ty} -> ({rtypes}) {{
  ^bb0({block_args}):
{body}
  }}
  func.return {', '.join(f'%r#{i}' for i in range(len(results)))} : {rtypes}
}}
"""


# ------------------------------------------------------------------ plain / load / accumulate


@pytest.mark.parametrize(
    "dt,ta,tb",
    [("bf16", False, False), ("bf16", True, True), ("bf16", True, False), ("bf16", False, True),
     ("f16", False, True), ("f32", False, True), ("f32", True, False)],
)
def test_plain_gemm(dt, ta, tb):
    check(gemm_program("    coda.yield %acc : !coda.tile<{M}x{N}xf32>", dt=dt, ta=ta, tb=tb))


@pytest.mark.parametrize("dt", ["bf16", "f16", "f32"])
def test_load_and_accumulate(dt):
    epi = """
    %cl = coda.load %c : tensor<{M}x{N}x{T}> -> !coda.tile<{M}x{N}xf32>
    %x = coda.accumulate %acc, %r : !coda.tile<{M}x{N}xf32>, tensor<{M}x{N}x{T}>
    %y = coda.map %x, %cl : (!coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>) -> !coda.tile<{M}x{N}xf32> {{
    ^bb0(%p: f32, %q: f32):
      %s = arith.mulf %p, %q : f32
      coda.yield %s : f32
    }}
    coda.yield %x, %y : !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>"""
    check(
        gemm_program(
            epi,
            [("c", "tensor<{M}x{N}x{T}>"), ("r", "tensor<{M}x{N}x{T}>")],
            ["tensor<{M}x{N}x{T}>", "tensor<{M}x{N}xf32>"],
            dt=dt,
            tb=True,
        )
    )


# ------------------------------------------------------------------ broadcast / index / scale / shift


@pytest.mark.parametrize("axis,length", [("rows", M), ("cols", N), ("cols", 12), ("scalar", None)])
def test_broadcast_scale_shift(axis, length):
    vty = "tensor<f32>" if axis == "scalar" else f"tensor<{length}xbf16>"
    epi = f"""
    %bc = coda.broadcast %v {axis} : {vty} -> !coda.tile<{{M}}x{{N}}xf32>
    %s = coda.scale %acc, %v {axis} : !coda.tile<{{M}}x{{N}}xf32>, {vty}
    %t = coda.shift %s, %u {axis} : !coda.tile<{{M}}x{{N}}xf32>, {vty}
    coda.yield %bc, %t : !coda.tile<{{M}}x{{N}}xf32>, !coda.tile<{{M}}x{{N}}xf32>"""
    check(gemm_program(epi, [("v", vty), ("u", vty)], ["tensor<{M}x{N}xf32>", "tensor<{M}x{N}x{T}>"], tb=True))


def test_index_rows_cols():
    epi = """
    %i = coda.index rows : !coda.tile<{M}x{N}xi32>
    %j = coda.index cols : !coda.tile<{M}x{N}xi32>
    %y = coda.map %acc, %i, %j : (!coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xi32>, !coda.tile<{M}x{N}xi32>) -> !coda.tile<{M}x{N}xf32> {{
    ^bb0(%x: f32, %r: i32, %c: i32):
      %k = arith.constant 100 : i32
      %rk = arith.muli %r, %k : i32
      %s = arith.addi %rk, %c : i32
      %f = arith.sitofp %s : i32 to f32
      %z = arith.addf %x, %f : f32
      coda.yield %z : f32
    }}
    coda.yield %y, %j : !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xi32>"""
    check(gemm_program(epi, [], ["tensor<{M}x{N}xf32>", "tensor<{M}x{N}xi32>"], dt="f32", tb=True))


# ------------------------------------------------------------------ map: the arith/math vocabulary


def test_map_math():
    epi = """
    %y:2 = coda.map %acc : (!coda.tile<{M}x{N}xf32>) -> (!coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>) {{
    ^bb0(%x: f32):
      %one = arith.constant 1.0 : f32
      %half = arith.constant 0.5 : f32
      %ax = math.absf %x : f32
      %ax1 = arith.addf %ax, %one : f32
      %l = math.log %ax1 : f32
      %sq = math.sqrt %ax1 : f32
      %rs = math.rsqrt %ax1 : f32
      %th = math.tanh %x : f32
      %hx = arith.mulf %x, %half : f32
      %th2 = math.tanh %hx : f32
      %er = math.erf %x : f32
      %sn = math.sin %x : f32
      %cs = math.cos %x : f32
      %nx = arith.negf %x : f32
      %e = math.exp %nx : f32
      %ep = arith.addf %e, %one : f32
      %sig = arith.divf %one, %ep : f32
      %pw = math.powf %ax1, %half : f32
      %mx = arith.maximumf %x, %l : f32
      %mn = arith.minimumf %x, %sq : f32
      %pos = arith.cmpf ogt, %x, %one : f32
      %sel = arith.select %pos, %th, %er : f32
      %a1 = arith.addf %l, %sq : f32
      %a2 = arith.addf %a1, %rs : f32
      %a3 = arith.addf %a2, %sel : f32
      %a4 = arith.addf %a3, %sn : f32
      %a5 = arith.subf %a4, %cs : f32
      %a6 = arith.addf %a5, %sig : f32
      %a7 = arith.addf %a6, %pw : f32
      %a8 = arith.addf %a7, %mx : f32
      %a9 = arith.addf %a8, %mn : f32
      %b1 = arith.mulf %th2, %x : f32
      coda.yield %a9, %b1 : f32, f32
    }}
    coda.yield %y#0, %y#1 : !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>"""
    check(gemm_program(epi, [], ["tensor<{M}x{N}xf32>", "tensor<{M}x{N}xf32>"], dt="f32", tb=True, k=8))


def test_map_tanh_small_and_large_arguments():
    # tanh is portable code under the interpreter: check it across its two formulas.
    text = """
func.func @f(%x: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %y = coda.elementwise [4, 64] ins(%x : tensor<4x64xf32>) -> tensor<4x64xf32> {
  ^bb0(%xin: tensor<4x64xf32>):
    %t = coda.load %xin : tensor<4x64xf32> -> !coda.tile<4x64xf32>
    %u = coda.map %t : (!coda.tile<4x64xf32>) -> !coda.tile<4x64xf32> {
    ^bb0(%v: f32):
      %r = math.tanh %v : f32
      coda.yield %r : f32
    }
    coda.yield %u : !coda.tile<4x64xf32>
  }
  func.return %y : tensor<4x64xf32>
}
"""
    x = torch.cat([torch.linspace(-1, 1, 128), torch.linspace(-30, 30, 128)]).reshape(4, 64)
    cm, _, (y,) = check(text, [x])
    assert (y.double() - torch.tanh(x.double())).abs().max() < 3e-7
    assert ((y.double() - torch.tanh(x.double())).abs() / torch.tanh(x.double()).abs().clamp_min(1e-30)).max() < 1e-6


# ------------------------------------------------------------------ pair_map


def test_pair_map_swiglu_interleaved():
    """2 -> 1 with interleave: pairs F apart in the weight become adjacent accumulator columns."""
    f = N // 2
    epi = """
    %g = coda.pair_map %acc : (!coda.tile<{M}x{N}xf32>) -> !coda.tile<{M}x24xf32> {{
    ^bb0(%gate: f32, %up: f32):
      %one = arith.constant 1.0 : f32
      %n = arith.negf %gate : f32
      %e = math.exp %n : f32
      %d = arith.addf %e, %one : f32
      %s = arith.divf %gate, %d : f32
      %y = arith.mulf %s, %up : f32
      coda.yield %y : f32
    }}
    coda.yield %g, %acc : !coda.tile<{M}x24xf32>, !coda.tile<{M}x{N}xf32>"""
    for dt in ("bf16", "f32"):
        cm, (a, b), (y, z) = check(
            gemm_program(epi, [], ["tensor<{M}x24x{T}>", "tensor<{M}x{N}x{T}>"], dt=dt, tb=True, interleave=f)
        )
        # against plain PyTorch swiglu of the natural layout
        zz = a.double() @ b.double().T
        ref = torch.nn.functional.silu(zz[:, :f]) * zz[:, f:]
        assert (y.double() - ref).abs().max() <= 0.02 * ref.abs().max()
        assert (z.double() - zz).abs().max() <= 0.02 * zz.abs().max()


@pytest.mark.parametrize("stride", [1, 4])
def test_pair_map_rotation_and_backward(stride):
    """2 -> 2 (a rotation by a per-row angle) and 1 -> 2 (narrow to wide) with a stride."""
    epi = f"""
    %ang = coda.broadcast %pos rows : tensor<{{M}}xf32> -> !coda.tile<{{M}}x{{N}}xf32>
    %rot:2 = coda.pair_map stride {stride} %acc, %ang : (!coda.tile<{{M}}x{{N}}xf32>, !coda.tile<{{M}}x{{N}}xf32>) -> (!coda.tile<{{M}}x{{N}}xf32>, !coda.tile<{{M}}x24xf32>) {{{{
    ^bb0(%x0: f32, %x1: f32, %a0: f32, %a1: f32):
      %c = math.cos %a0 : f32
      %s = math.sin %a1 : f32
      %p = arith.mulf %x0, %c : f32
      %q = arith.mulf %x1, %s : f32
      %o0 = arith.subf %p, %q : f32
      %r = arith.mulf %x0, %s : f32
      %t = arith.mulf %x1, %c : f32
      %o1 = arith.addf %r, %t : f32
      %d = arith.subf %x1, %x0 : f32
      coda.yield %o0, %o1, %d : f32, f32, f32
    }}}}
    %w = coda.pair_map stride {stride} %rot#1 : (!coda.tile<{{M}}x24xf32>) -> !coda.tile<{{M}}x{{N}}xf32> {{{{
    ^bb0(%v: f32):
      %two = arith.constant 2.0 : f32
      %v2 = arith.mulf %v, %two : f32
      coda.yield %v, %v2 : f32, f32
    }}}}
    coda.yield %rot#0, %rot#1, %w : !coda.tile<{{M}}x{{N}}xf32>, !coda.tile<{{M}}x24xf32>, !coda.tile<{{M}}x{{N}}xf32>"""
    check(
        gemm_program(
            epi,
            [("pos", "tensor<{M}xf32>")],
            ["tensor<{M}x{N}x{T}>", "tensor<{M}x24xf32>", "tensor<{M}x{N}xf32>"],
            tb=True,
        )
    )


# ------------------------------------------------------------------ reductions


@pytest.mark.parametrize("kind", ["sum", "sumsq", "max", "lse"])
@pytest.mark.parametrize("dim", [1, 0])
def test_reduce(kind, dim):
    length, along = (M, "rows") if dim == 1 else (70, "cols")
    comb = {"sum": "sum", "sumsq": "sum", "max": "max", "lse": "lse"}[kind]
    pty = f"!coda.partials<{along}, {length}, {comb}>"
    epi = f"""
    %p = coda.reduce {kind} %acc dim {dim} : !coda.tile<{{M}}x{{N}}xf32> -> {pty}
    coda.yield %p : {pty}"""
    check(gemm_program(epi, [], [pty], tb=True, m=M, n=70))


def test_reduce_dim0_interleaved():
    pty = "!coda.partials<cols, 48, sum>"
    epi = f"""
    %p = coda.reduce sum %acc dim 0 : !coda.tile<{{M}}x{{N}}xf32> -> {pty}
    coda.yield %p, %acc : {pty}, !coda.tile<{{M}}x{{N}}xf32>"""
    check(gemm_program(epi, [], [pty, "tensor<{M}x{N}xf32>"], tb=True, interleave=8))


@pytest.mark.parametrize("kind", ["sum", "sumsq", "max"])
@pytest.mark.parametrize("width", [8, 64])
def test_segment_reduce(kind, width):
    n = 128
    epi = f"""
    %s = coda.segment_reduce {kind} %acc width {width} : !coda.tile<{{M}}x{{N}}xf32>
    coda.yield %s : !coda.tile<{{M}}x{{N}}xf32>"""
    cm, _, _ = check(gemm_program(epi, [], ["tensor<{M}x{N}xf32>"], tb=True, n=n))
    if width == 64:
        assert "bn_multiple_of=64" in cm.source


def test_select():
    pty = "!coda.partials<rows, {M}, sum>"
    epi = f"""
    %p = coda.select %acc, %idx : !coda.tile<{{M}}x{{N}}xf32>, tensor<{{M}}xi32> -> {pty}
    coda.yield %p : {pty}"""
    text = gemm_program(epi, [("idx", "tensor<{M}xi32>")], [pty], tb=True, n=70)
    # targets in range, plus out-of-range ones (ignored rows select nothing: 0)
    check(text, int_high={2: (-3, 70)})


@pytest.mark.parametrize("whole", ["", " whole rows"])
def test_select_of_a_load_reads_the_one_element(whole):
    """A select of a plain load in an elementwise kernel gathers x[m, idx[m]] where the tile holds
    it instead of comparing every column (tiled: partials; whole rows: completed per row), with
    targets on tile edges, the last column and out of range on both sides (0 there)."""
    res = "tensor<37xf32>" if whole else "!coda.partials<rows, 37, sum>"
    text = f"""
func.func @f(%x: tensor<37x203xbf16>, %t: tensor<37xi32>) -> ({res}) {{
  %s = coda.elementwise [37, 203]{whole} ins(%x, %t : tensor<37x203xbf16>, tensor<37xi32>) -> ({res}) {{
  ^bb0(%xi: tensor<37x203xbf16>, %ti: tensor<37xi32>):
    %v = coda.load %xi : tensor<37x203xbf16> -> !coda.tile<37x203xf32>
    %p = coda.select %v, %ti : !coda.tile<37x203xf32>, tensor<37xi32> -> !coda.partials<rows, 37, sum>
    coda.yield %p : !coda.partials<rows, 37, sum>
  }}
  func.return %s : {res}
}}
"""
    cm, _, _ = check(text, int_high={1: (-3, 206)})
    assert "sel_hit" in cm.source  # the gather, not the [BM, BN] compare
    edges = torch.tensor([0, 31, 32, 63, 64, 127, 128, 202, 203, -1, -100] * 4, dtype=torch.int32)[:37]
    x = torch.randn(37, 203).to(torch.bfloat16)
    _, _, (out,) = check(text, inputs=[x, edges])
    row = out if whole else fold_partials(out, "sum")
    inside = (edges >= 0) & (edges < 203)
    expected = torch.where(inside, x.float()[torch.arange(37), edges.clamp(0, 202).long()], torch.zeros(()))
    assert torch.equal(row.double(), expected.double())  # the element itself, exactly


# ------------------------------------------------------------------ elementwise and fold


def test_elementwise_kernel():
    text = """
func.func @f(%x: tensor<37x50xf16>, %w: tensor<50xf16>) -> (tensor<37x50xf16>, !coda.partials<rows, 37, sum>) {
  %y, %p = coda.elementwise [37, 50] ins(%x, %w : tensor<37x50xf16>, tensor<50xf16>) -> (tensor<37x50xf16>, !coda.partials<rows, 37, sum>) {
  ^bb0(%xi: tensor<37x50xf16>, %wi: tensor<50xf16>):
    %t = coda.load %xi : tensor<37x50xf16> -> !coda.tile<37x50xf32>
    %s = coda.scale %t, %wi cols : !coda.tile<37x50xf32>, tensor<50xf16>
    %q = coda.reduce sumsq %t dim 1 : !coda.tile<37x50xf32> -> !coda.partials<rows, 37, sum>
    coda.yield %s, %q : !coda.tile<37x50xf32>, !coda.partials<rows, 37, sum>
  }
  func.return %y, %p : tensor<37x50xf16>, !coda.partials<rows, 37, sum>
}
"""
    check(text)


FOLD_LOSS = """
func.func @f(%a: tensor<37x40xbf16>, %b: tensor<100x40xbf16>, %t: tensor<37xi32>, %scale: tensor<f32>)
    -> (tensor<37xf32>, tensor<f32>, tensor<37xf32>) {
  %l, %mx, %sel = coda.gemm %a, %b transpose_b ins(%t : tensor<37xi32>) : tensor<37x40xbf16>, tensor<100x40xbf16>
      -> (!coda.partials<rows, 37, lse>, !coda.partials<rows, 37, max>, !coda.partials<rows, 37, sum>) {
  ^bb0(%acc: !coda.tile<37x100xf32>, %ti: tensor<37xi32>):
    %p = coda.reduce lse %acc dim 1 : !coda.tile<37x100xf32> -> !coda.partials<rows, 37, lse>
    %q = coda.reduce max %acc dim 1 : !coda.tile<37x100xf32> -> !coda.partials<rows, 37, max>
    %s = coda.select %acc, %ti : !coda.tile<37x100xf32>, tensor<37xi32> -> !coda.partials<rows, 37, sum>
    coda.yield %p, %q, %s : !coda.partials<rows, 37, lse>, !coda.partials<rows, 37, max>, !coda.partials<rows, 37, sum>
  }
  %row, %loss, %m2 = coda.fold %l, %mx, %sel : !coda.partials<rows, 37, lse>, !coda.partials<rows, 37, max>, !coda.partials<rows, 37, sum>
      ins(%t, %scale : tensor<37xi32>, tensor<f32>) -> (tensor<37xf32>, tensor<f32>, tensor<37xf32>) {
  ^bb0(%lse: f32, %m: f32, %x: f32, %tt: i32, %sc: f32):
    %ign = arith.constant -100 : i32
    %keep = arith.cmpi ne, %tt, %ign : i32
    %d = arith.subf %lse, %x : f32
    %z = arith.constant 0.0 : f32
    %v = arith.select %keep, %d, %z : f32
    %w = arith.mulf %v, %sc : f32
    coda.yield %d, %w, %m : f32, f32, f32
  } finalize {
  ^bb0(%total: f32):
    %n = arith.constant 37.0 : f32
    %mean = arith.divf %total, %n : f32
    coda.yield %mean : f32
  }
  func.return %row, %loss, %m2 : tensor<37xf32>, tensor<f32>, tensor<37xf32>
}
"""


def test_fold_lse_max_select_loss():
    g = torch.Generator().manual_seed(3)
    a = torch.randn(37, 40, generator=g).bfloat16()
    b = torch.randn(100, 40, generator=g).bfloat16()
    t = torch.randint(0, 100, (37,), generator=g).int()
    t[::5] = -100
    scale = torch.tensor(0.5)
    cm, _, (row, loss, m2) = check(FOLD_LOSS, [a, b, t, scale])
    logits = a.double() @ b.double().T
    keep = t != -100
    ce = torch.nn.functional.cross_entropy(logits[keep], t[keep].long(), reduction="sum") * 0.5 / 37
    assert abs(loss.item() - ce.item()) <= 1e-5 * abs(ce.item())
    assert cm.kernel_count("f") == 2


def test_fold_handles_minus_inf_lse_partials():
    """Tiles whose whole row slice is -inf give -inf lse partials; the fold must skip them."""
    text = """
func.func @f(%x: tensor<5x100xf32>) -> tensor<5xf32> {
  %p = coda.elementwise [5, 100] ins(%x : tensor<5x100xf32>) -> !coda.partials<rows, 5, lse> {
  ^bb0(%xi: tensor<5x100xf32>):
    %t = coda.load %xi : tensor<5x100xf32> -> !coda.tile<5x100xf32>
    %j = coda.index cols : !coda.tile<5x100xi32>
    %i = coda.index rows : !coda.tile<5x100xi32>
    %m = coda.map %t, %j, %i : (!coda.tile<5x100xf32>, !coda.tile<5x100xi32>, !coda.tile<5x100xi32>) -> !coda.tile<5x100xf32> {
    ^bb0(%v: f32, %c: i32, %r: i32):
      %lim = arith.constant 20 : i32
      %keep = arith.cmpi slt, %c, %lim : i32
      %zero = arith.constant 0 : i32
      %first = arith.cmpi eq, %r, %zero : i32
      %drop = arith.ori %first, %first : i1
      %k2 = arith.xori %drop, %keep : i1
      %ninf = arith.constant 0xFF800000 : f32
      %o = arith.select %keep, %v, %ninf : f32
      %o2 = arith.select %first, %ninf, %o : f32
      coda.yield %o2 : f32
    }
    %l = coda.reduce lse %m dim 1 : !coda.tile<5x100xf32> -> !coda.partials<rows, 5, lse>
    coda.yield %l : !coda.partials<rows, 5, lse>
  }
  %r = coda.fold %p : !coda.partials<rows, 5, lse> -> tensor<5xf32> {
  ^bb0(%v: f32):
    coda.yield %v : f32
  }
  func.return %r : tensor<5xf32>
}
"""
    x = torch.randn(5, 100)
    cm, _, (r,) = check(text, [x])
    assert r[0].item() == float("-inf")
    assert torch.allclose(r[1:].double(), torch.logsumexp(x[1:, :20].double(), 1), rtol=1e-6)


# ------------------------------------------------------------------ interleave: N-wide tensors in user layout


@pytest.mark.parametrize("dt", ["bf16", "f16", "f32"])
def test_interleave_loads_stores_and_indices(dt):
    epi = """
    %c = coda.load %cm : tensor<{M}x{N}x{T}> -> !coda.tile<{M}x{N}xf32>
    %x = coda.accumulate %acc, %cm : !coda.tile<{M}x{N}xf32>, tensor<{M}x{N}x{T}>
    %s = coda.scale %x, %v cols : !coda.tile<{M}x{N}xf32>, tensor<{N}x{T}>
    %bc = coda.broadcast %u cols : tensor<12x{T}> -> !coda.tile<{M}x{N}xf32>
    %j = coda.index cols : !coda.tile<{M}x{N}xi32>
    %y = coda.map %s, %c, %bc, %j : (!coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xi32>) -> !coda.tile<{M}x{N}xf32> {{
    ^bb0(%p: f32, %q: f32, %r: f32, %jj: i32):
      %f = arith.sitofp %jj : i32 to f32
      %a1 = arith.addf %p, %q : f32
      %a2 = arith.mulf %a1, %r : f32
      %a3 = arith.addf %a2, %f : f32
      coda.yield %a3 : f32
    }}
    %sel = coda.select %y, %idx : !coda.tile<{M}x{N}xf32>, tensor<{M}xi32> -> !coda.partials<rows, {M}, sum>
    coda.yield %y, %sel : !coda.tile<{M}x{N}xf32>, !coda.partials<rows, {M}, sum>"""
    text = gemm_program(
        epi,
        [("cm", "tensor<{M}x{N}x{T}>"), ("v", "tensor<{N}x{T}>"), ("u", "tensor<12x{T}>"), ("idx", "tensor<{M}xi32>")],
        ["tensor<{M}x{N}x{T}>", "!coda.partials<rows, {M}, sum>"],
        dt=dt,
        tb=True,
        interleave=12,
    )
    check(text, int_high={5: (0, N)})


def test_interleave_wide_pair_map_one_to_two():
    """interleave_wide h: 2N-wide tensors are read/written at perm(c) of the 2N-wide space."""
    epi = """
    %zt = coda.load %z : tensor<{M}x96x{T}> -> !coda.tile<{M}x96xf32>
    %j = coda.index cols : !coda.tile<{M}x96xi32>
    %d, %y = coda.pair_map %acc, %zt, %j : (!coda.tile<{M}x{N}xf32>, !coda.tile<{M}x96xf32>, !coda.tile<{M}x96xi32>) -> (!coda.tile<{M}x96xf32>, !coda.tile<{M}x{N}xf32>) {{
    ^bb0(%dy: f32, %gate: f32, %up: f32, %cg: i32, %cu: i32):
      %ra = arith.mulf %dy, %up : f32
      %rb = arith.mulf %dy, %gate : f32
      %rc = arith.sitofp %cu : i32 to f32
      %rs = arith.subf %gate, %rc : f32
      coda.yield %ra, %rb, %rs : f32, f32, f32
    }}
    %w = coda.reduce sum %d dim 0 : !coda.tile<{M}x96xf32> -> !coda.partials<cols, 96, sum>
    coda.yield %d, %y, %w : !coda.tile<{M}x96xf32>, !coda.tile<{M}x{N}xf32>, !coda.partials<cols, 96, sum>"""
    text = gemm_program(
        epi, [("z", "tensor<{M}x96x{T}>")],
        ["tensor<{M}x96x{T}>", "tensor<{M}x{N}x{T}>", "!coda.partials<cols, 96, sum>"], tb=True,
    ).replace(" transpose_b", " transpose_b interleave_wide 48", 1)
    cm, (a, b, z), (d, y, w) = check(text)
    # in the user's layout: d = [dy * up | dy * gate] over the [gate | up] halves of z
    dy = a.double() @ b.double().T
    zz = z.double()
    ref_d = torch.cat([dy * zz[:, 48:], dy * zz[:, :48]], 1)
    assert (d.double() - ref_d).abs().max() <= 0.02 * ref_d.abs().max()


def test_fixed_tile_config():
    epi = """
    %p = coda.pair_map %acc : (!coda.tile<{M}x{N}xf32>) -> !coda.tile<{M}x24xf32> {{
    ^bb0(%g: f32, %u: f32):
      %y = arith.mulf %g, %u : f32
      coda.yield %y : f32
    }}
    %s = coda.reduce sum %acc dim 1 : !coda.tile<{M}x{N}xf32> -> !coda.partials<rows, {M}, sum>
    coda.yield %p, %s : !coda.tile<{M}x24xf32>, !coda.partials<rows, {M}, sum>"""
    text = gemm_program(epi, [], ["tensor<{M}x24x{T}>", "!coda.partials<rows, {M}, sum>"], tb=True).replace(
        " transpose_b", " transpose_b config #coda.config<bm = 16, bn = 16, bk = 16, warps = 4, stages = 2>", 1
    )
    cm, _, (_, parts) = check(text)
    assert "config=_rt.fixed_gemm_config(16, 16, 16, 4, 2)" in cm.source
    assert parts.shape == (M, 3)  # one partial per 16-wide column tile


@pytest.mark.parametrize("m,n,k", [(1, 2, 1), (5, 6, 3), (65, 34, 17), (130, 66, 100)])
def test_odd_shapes(m, n, k):
    """Tiny and ragged problems: every edge masked, partials of partly empty tiles."""
    epi = """
    %x = coda.accumulate %acc, %r : !coda.tile<{M}x{N}xf32>, tensor<{M}x{N}x{T}>
    %h = coda.scale %x, %g cols : !coda.tile<{M}x{N}xf32>, tensor<{N}x{T}>
    %s = coda.reduce sumsq %x dim 1 : !coda.tile<{M}x{N}xf32> -> !coda.partials<rows, {M}, sum>
    %l = coda.reduce lse %h dim 0 : !coda.tile<{M}x{N}xf32> -> !coda.partials<cols, {N}, lse>
    %y = coda.pair_map %h : (!coda.tile<{M}x{N}xf32>) -> !coda.tile<{M}x{P}xf32> {{
    ^bb0(%a0: f32, %a1: f32):
      %p = arith.mulf %a0, %a1 : f32
      coda.yield %p : f32
    }}
    coda.yield %x, %y, %s, %l : !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{P}xf32>, !coda.partials<rows, {M}, sum>, !coda.partials<cols, {N}, lse>"""
    p = n // 2
    text = gemm_program(
        epi.replace("{P}", str(p)),
        [("r", "tensor<{M}x{N}x{T}>"), ("g", "tensor<{N}x{T}>")],
        ["tensor<{M}x{N}x{T}>", f"tensor<{{M}}x{p}x{{T}}>", "!coda.partials<rows, {M}, sum>", "!coda.partials<cols, {N}, lse>"],
        tb=True, m=m, n=n, k=k,
    )
    check(text, seed=m + n + k)


@pytest.mark.parametrize("dt", ["bf16", "f16", "f32"])
def test_combined_epilogue_every_dtype(dt):
    """One kernel using most primitives, in each element type, with a transposed A."""
    n = 64
    epi = """
    %x = coda.accumulate %acc, %r : !coda.tile<{M}x{N}xf32>, tensor<{M}x{N}x{T}>
    %h = coda.scale %x, %g cols : !coda.tile<{M}x{N}xf32>, tensor<{N}x{T}>
    %bs = coda.shift %h, %r0 rows : !coda.tile<{M}x{N}xf32>, tensor<{M}xf32>
    %sg = coda.segment_reduce max %bs width 16 : !coda.tile<{M}x{N}xf32>
    %rot = coda.pair_map stride 8 %bs : (!coda.tile<{M}x{N}xf32>) -> !coda.tile<{M}x{N}xf32> {{
    ^bb0(%p: f32, %q: f32):
      %np = arith.negf %q : f32
      %e = math.exp %p : f32
      coda.yield %np, %e : f32, f32
    }}
    %ss = coda.reduce sumsq %x dim 1 : !coda.tile<{M}x{N}xf32> -> !coda.partials<rows, {M}, sum>
    %ls = coda.reduce lse %rot dim 1 : !coda.tile<{M}x{N}xf32> -> !coda.partials<rows, {M}, lse>
    %mx = coda.reduce max %h dim 0 : !coda.tile<{M}x{N}xf32> -> !coda.partials<cols, {N}, max>
    %se = coda.select %h, %t : !coda.tile<{M}x{N}xf32>, tensor<{M}xi32> -> !coda.partials<rows, {M}, sum>
    coda.yield %x, %sg, %rot, %ss, %ls, %mx, %se : !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>,
        !coda.partials<rows, {M}, sum>, !coda.partials<rows, {M}, lse>, !coda.partials<cols, {N}, max>, !coda.partials<rows, {M}, sum>"""
    text = gemm_program(
        epi,
        [("r", "tensor<{M}x{N}x{T}>"), ("g", "tensor<{N}x{T}>"), ("r0", "tensor<{M}xf32>"), ("t", "tensor<{M}xi32>")],
        ["tensor<{M}x{N}x{T}>", "tensor<{M}x{N}x{T}>", "tensor<{M}x{N}xf32>", "!coda.partials<rows, {M}, sum>",
         "!coda.partials<rows, {M}, lse>", "!coda.partials<cols, {N}, max>", "!coda.partials<rows, {M}, sum>"],
        dt=dt, ta=True, n=n,
    )
    check(text, int_high={5: (0, n)})
