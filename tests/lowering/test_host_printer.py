"""The `host` dialect's verifiers, convert-coda-to-host on the test programs, and the host
printer (`lowering/host_printer.py`) on hand-built IR.

A host function built op by op is printed, executed and compared with a float64 reference:
what the IR says is what runs. The pass's host.func of every test program verifies and
records as many launches as it makes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from xdsl.dialects.builtin import DYNAMIC_INDEX, IntAttr, StringAttr, TensorType, f32, f64, i32
from xdsl.ir import Block, Region
from xdsl.utils.exceptions import VerifyException

from coda_ir import parse
from coda_ir.context import make_context
from coda_ir.dialects import triton_host as host
from coda_ir.lowering.host_printer import print_host_function
from coda_ir.lowering.coda_to_host import ConvertCodaToHostPass, host_functions
from coda_ir.lowering.coda_to_tl import ConvertCodaToTLPass

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"

HEADER = """
import torch
import triton
from coda_ir.runtime import library as _lib
from coda_ir.runtime import compiled as _rt
"""


def _library_function() -> host.FuncOp:
    """f(ids, w, x) = (w[ids], x recovered from concat([w[ids], x], 1), the embedding gradient of
    that slice as float64 over 7 rows)."""
    ids_t, w_t, x_t = TensorType(i32, [5]), TensorType(f32, [7, 6]), TensorType(f32, [5, 6])
    rows_t, cat_t, grad_t = TensorType(f32, [5, 6]), TensorType(f32, [5, 12]), TensorType(f64, [7, 6])
    fn = host.FuncOp("f", [ids_t, w_t, x_t], [rows_t, rows_t, grad_t], 4)
    block = fn.body.block
    ids, w, x = block.args
    for a, n in zip(block.args, ("ids", "w", "x")):
        a.name_hint = n
    block.add_op(host.CheckArgumentsOp([ids, w, x]))
    block.add_op(host.DeviceOfOp([ids, w, x]))
    emb = host.LibraryCallOp("embedding", [ids, w], [], [rows_t])
    cat = host.LibraryCallOp("concat", [emb.res[0], x], [IntAttr(1)], [cat_t], list_operands=True)
    part = host.LibraryCallOp("slice_copy", [cat.res[0]], [IntAttr(1), IntAttr(6), IntAttr(6)], [rows_t])
    grad = host.LibraryCallOp("embedding_grad", [part.res[0], ids], [IntAttr(7), f64], [grad_t])
    for op, name in ((emb, "e"), (cat, "c"), (part, "s"), (grad, "g")):
        op.res[0].name_hint = name
        block.add_op(op)
    block.add_op(host.ReturnOp([emb.res[0], part.res[0], grad.res[0]]))
    return fn


def test_printed_host_function_runs_as_built():
    fn = _library_function()
    fn.verify()
    lines = print_host_function(fn, {})
    assert lines[3] == "def f(ids, w, x):"
    assert "    c = _lib.concat([e, x], 1)" in lines
    assert "    g = _lib.embedding_grad(s, ids, 7, torch.float64)" in lines
    namespace: dict = {}
    exec(HEADER + "\n".join(lines), namespace)  # noqa: S102 - the generated code under test
    gen = torch.Generator().manual_seed(5)
    ids = torch.tensor([3, 0, 3, 6, 1], dtype=torch.int32)
    w, x = torch.randn(7, 6, generator=gen), torch.randn(5, 6, generator=gen)
    e, s, g = namespace["f"](ids, w, x)
    assert torch.equal(e, w[ids.long()])
    assert torch.equal(s, x)
    ref = torch.zeros(7, 6, dtype=torch.float64).index_add_(0, ids.long(), x.double())
    # summed in fp32 (dy's dtype), at most two rows per id here: one fp32 rounding
    assert g.dtype == torch.float64 and torch.allclose(g, ref, rtol=2**-23, atol=0)
    from coda_ir.errors import ArgumentError

    with pytest.raises(ArgumentError, match=r"f\(\): argument #2 'x' must be"):  # the signature is checked
        namespace["f"](ids, w, x[:4])


def test_verifiers_refuse_ill_typed_ops():
    fn = _library_function()
    block = fn.body.block
    ids, w, x = block.args
    dev = block.first_op.next_op.results[0]  # type: ignore[union-attr]
    with pytest.raises(VerifyException, match="dynamic extent"):
        host.EmptyOp(dev, TensorType(f32, [5, DYNAMIC_INDEX])).verify()
    with pytest.raises(VerifyException, match="unknown library function"):
        host.LibraryCallOp("gather", [x], [], [x.type]).verify()
    with pytest.raises(VerifyException, match="literal is an integer, a boolean, a finite f64 or a torch dtype"):
        host.LibraryCallOp("slice_copy", [x], [StringAttr("1")], [x.type]).verify()
    spec = host.FoldSpecOp([], [], [x], 5, False)
    with pytest.raises(VerifyException, match="at least two members"):
        host.LaunchGroupOp("k", [spec.result]).verify()
    with pytest.raises(VerifyException, match="sums is whether an output is rank 0"):
        host.LaunchFoldOp("k", [], [], [x], 5, True).verify()
    with pytest.raises(VerifyException, match=r"partials are \[L, tiles\] buffers"):
        host.LaunchFoldOp("k", [w], [], [x], 5, False).verify()
    region = Region(Block(arg_types=[host.ConfigType()]))
    region.block.add_op(host.YieldOp([x, x]))
    with pytest.raises(VerifyException, match="n_inputs out of range"):
        host.LaunchElementwiseOp("k", (5, 6), bn_multiple_of=1, n_inputs=3, whole=None, config=None,
                                 result_type=host.TupleType([x.type, x.type]), args=region).verify()
    region2 = Region(Block(arg_types=[host.ConfigType()]))
    region2.block.add_op(host.YieldOp([x, x]))
    with pytest.raises(VerifyException, match="whole is 'rows' or 'cols'"):
        host.LaunchElementwiseOp("k", (5, 6), bn_multiple_of=1, n_inputs=1, whole="tiles", config=None,
                                 result_type=host.TupleType([x.type, x.type]), args=region2).verify()
    for width, whole, message in ((3, None, "width_multiple is a power of two above 1"),
                                  (2, "rows", "a whole-rows / whole-cols kernel takes no width_multiple")):
        region3 = Region(Block(arg_types=[host.ConfigType()]))
        region3.block.add_op(host.YieldOp([x, x]))
        with pytest.raises(VerifyException, match=message):
            host.LaunchElementwiseOp("k", (5, 6), bn_multiple_of=1, n_inputs=1, whole=whole, config=None,
                                     result_type=host.TupleType([x.type, x.type]), args=region3,
                                     width_multiple=width).verify()
    tup = host.LaunchFoldOp("k", [], [], [x], 5, False)
    with pytest.raises(VerifyException, match="start out of range"):
        bad = host.UnpackOp(tup.result, 0)
        bad.properties["start"] = IntAttr(2)
        bad.verify()
    with pytest.raises(VerifyException, match="tensor of a torch dtype"):
        host.ReturnOp([dev]).verify()


@pytest.mark.parametrize("path", sorted((PROGRAMS / "coda").glob("*.mlir")), ids=lambda p: p.stem)
@pytest.mark.parametrize("pipeline", [None, "coda-group-launches"])
def test_pass_output_verifies_and_counts_its_launches(path, pipeline):
    from coda_ir import lower

    from coda_ir.transforms.legalize import ensure_legalized

    module = lower(parse(path.read_text()), pipeline)
    ensure_legalized(module)  # convert-coda-to-tl builds elementwise kernels from its records
    ctx = make_context()
    ConvertCodaToTLPass().apply(ctx, module)
    ConvertCodaToHostPass().apply(ctx, module)
    module.verify()
    fns = host_functions(module)
    assert fns
    launches = (host.LaunchGemmOp, host.LaunchElementwiseOp, host.LaunchFoldOp, host.LaunchGroupOp, host.LibraryCallOp)
    for fn in fns:
        made = sum(1 for op in fn.walk() if isinstance(op, launches))
        assert made == fn.launches.data > 0
        # every kernel argument is either a fresh buffer or a value the function holds, and
        # every partials buffer's tile count comes from the launch's own configuration
        for op in fn.walk():
            if isinstance(op, host.TilesOp):
                assert isinstance(op.config.owner, Block) and isinstance(op.config.owner.parent_op(), host.ArgsLambdaLaunch)


SHADOW = """
func.func @shadow(%_shadow_k0_elementwise: tensor<5x6xf32>, %torch: tensor<5x6xf32>) -> tensor<5x6xf32> {
  %o = coda.elementwise [5, 6] ins(%_shadow_k0_elementwise, %torch : tensor<5x6xf32>, tensor<5x6xf32>) -> tensor<5x6xf32> {
  ^bb0(%at: tensor<5x6xf32>, %bt: tensor<5x6xf32>):
    %x = coda.load %at : tensor<5x6xf32> -> !coda.tile<5x6xf32>
    %y = coda.load %bt : tensor<5x6xf32> -> !coda.tile<5x6xf32>
    %z = coda.map %x, %y : (!coda.tile<5x6xf32>, !coda.tile<5x6xf32>) -> !coda.tile<5x6xf32> {
    ^bb0(%u: f32, %v: f32):
      %w = arith.subf %u, %v : f32
      coda.yield %w : f32
    }
    coda.yield %z : !coda.tile<5x6xf32>
  }
  func.return %o : tensor<5x6xf32>
}
"""


def test_argument_named_like_its_kernel_does_not_shadow_it():
    """A parameter named like the kernel the function launches (or a module the host code uses)
    gets another Python name: the launch still calls the kernel, `torch` is still torch."""
    import coda_ir

    cm = coda_ir.compile(SHADOW, pipeline=None)
    gen = torch.Generator().manual_seed(2)
    a, b = torch.randn(5, 6, generator=gen), torch.randn(5, 6, generator=gen)
    assert torch.equal(cm.shadow(a, b), a - b)  # one fp32 subtraction, exactly torch's
