"""coda_ir.torch.function: custom ops with autograd through the compiled @f_bwd.

The hand-written module below follows the nn-autodiff contract (NN_DIALECT.md): @f_fwd returns
f's results then saved tensors, @f_bwd takes the saved tensors then one upstream gradient per
result and returns one gradient per float argument. It saves an input (x), one of f's results
(y) and a tensor computed only for the backward (u), has two results (so a loss that uses one
leaves the other's gradient None) and an unused integer argument (which gets no gradient).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch
import torch.utils.checkpoint

import coda_ir
import coda_ir.torch
from coda_ir.runtime.compiled import ArgumentError
from coda_ir.testing import assert_matches, reference_gradients

M, N = 8, 16
T = f"tensor<{M}x{N}x{{dt}}>"


def module_text(dt: str = "f32") -> str:
    t = T.format(dt=dt)
    i = f"tensor<{M}xi32>"
    return f"""
// y = x * w, z = (y + v) * x
func.func @f(%x: {t}, %w: {t}, %v: {t}, %tok: {i}) -> ({t}, {t}) {{
  %y = nn.mul %x, %w : {t}, {t} -> {t}
  %u = nn.add %y, %v : {t}, {t} -> {t}
  %z = nn.mul %u, %x : {t}, {t} -> {t}
  func.return %y, %z : {t}, {t}
}}
func.func @f_fwd(%x: {t}, %w: {t}, %v: {t}, %tok: {i}) -> ({t}, {t}, {t}, {t}, {t}, {t}) {{
  %y = nn.mul %x, %w : {t}, {t} -> {t}
  %u = nn.add %y, %v : {t}, {t} -> {t}
  %z = nn.mul %u, %x : {t}, {t} -> {t}
  func.return %y, %z, %x, %w, %y, %u : {t}, {t}, {t}, {t}, {t}, {t}
}}
// dz/du = x, dz/dx = u (direct), dy/dx = w, dy/dw = x, du/dv = 1
func.func @f_bwd(%x: {t}, %w: {t}, %y: {t}, %u: {t}, %dy: {t}, %dz: {t}) -> ({t}, {t}, {t}) {{
  %du = nn.mul %dz, %x : {t}, {t} -> {t}
  %dyt = nn.add %dy, %du : {t}, {t} -> {t}
  %dx0 = nn.mul %dyt, %w : {t}, {t} -> {t}
  %dx1 = nn.mul %dz, %u : {t}, {t} -> {t}
  %dx = nn.add %dx0, %dx1 : {t}, {t} -> {t}
  %dw = nn.mul %dyt, %x : {t}, {t} -> {t}
  func.return %dx, %dw, %du : {t}, {t}, {t}
}}
"""


def torch_f(x, w, v):
    y = x * w
    return y, (y + v) * x


# separate kernels per nn op, so dropping a gradient visibly drops kernels
UNFUSED = "nn-to-coda{fuse=false group-launches=false}"


@pytest.fixture(scope="module")
def fn():
    return coda_ir.torch.function(module_text(), pipeline=UNFUSED)


def inputs(dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, w, v = (torch.randn(M, N, generator=g, dtype=torch.float64).to(dtype) for _ in range(3))
    tok = torch.randint(0, 100, (M,), generator=g, dtype=torch.int32)
    return x, w, v, tok


def reference_grads(x, w, v, dy, dz, dtype):
    """Autograd of the same math with every tensor in `dtype` (float64: exact)."""
    leaves = [t.detach().to(dtype).requires_grad_(True) for t in (x, w, v)]
    y, z = torch_f(*leaves)
    torch.autograd.backward([y, z], [dy.to(dtype), dz.to(dtype)])
    return [(y, z), [t.grad for t in leaves]]


def test_forward_and_gradients_match_float64_autograd(fn):
    x, w, v, tok = inputs()
    leaves = [t.clone().requires_grad_(True) for t in (x, w, v)]
    y, z = fn(*leaves, tok)
    g = torch.Generator().manual_seed(1)
    dy, dz = torch.randn(M, N, generator=g), torch.randn(M, N, generator=g)
    torch.autograd.backward([y, z], [dy, dz])
    (y64, z64), grads64 = reference_grads(x, w, v, dy, dz, torch.float64)
    (y32, z32), grads32 = reference_grads(x, w, v, dy, dz, torch.float32)
    outs = [y.detach(), z.detach(), *[t.grad for t in leaves]]
    assert_matches(outs, [y64, z64, *grads64], [y32, z32, *grads32], ["y", "z", "dx", "dw", "dv"])
    assert all(t.grad.dtype == torch.float32 for t in leaves)


def test_bf16_gradients_within_the_bar():
    fn = coda_ir.torch.function(module_text("bf16"))
    x, w, v, tok = inputs(torch.bfloat16)
    leaves = [t.clone().requires_grad_(True) for t in (x, w, v)]
    y, z = fn(*leaves, tok)
    dy, dz = torch.randn(M, N).bfloat16(), torch.randn(M, N).bfloat16()
    torch.autograd.backward([y, z], [dy, dz])
    _, grads64 = reference_grads(x, w, v, dy, dz, torch.float64)
    _, grads16 = reference_grads(x, w, v, dy, dz, torch.bfloat16)
    assert_matches([t.grad for t in leaves], grads64, grads16, ["dx", "dw", "dv"])
    assert all(t.grad.dtype == torch.bfloat16 for t in leaves)


def test_unused_result_gets_zero_gradient_and_integer_input_none(fn):
    x, w, v, tok = inputs()
    leaves = [t.clone().requires_grad_(True) for t in (x, w, v)]
    _, z = fn(*leaves, tok)
    z.sum().backward()  # y unused: its upstream gradient is None -> zeros
    _, grads64 = reference_grads(x, w, v, torch.zeros(M, N), torch.ones(M, N), torch.float64)
    for got, ref in zip([t.grad for t in leaves], grads64):
        torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)
    # an integer argument never gets a gradient (it cannot require one); autograd accepts None
    assert not tok.requires_grad


def test_saved_tensors_from_inputs_and_results_are_not_copied(fn):
    # x and w are saved as the inputs themselves, y as the result; only u is an extra output
    assert [(s.source, s.index) for s in fn.saved] == [("input", 0), ("input", 1), ("result", 0), ("extra", 0)]
    assert fn.num_saved == 4


def test_backward_fills_no_zero_gradient_for_saved_extra_outputs(fn):
    # the extra output u exists only to be saved: autograd must not materialize a zero tensor
    # for its gradient (a full-size fill of every saved activation in every step)
    from torch.utils._python_dispatch import TorchDispatchMode

    class CountFills(TorchDispatchMode):
        fills: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket in (torch.ops.aten.zeros, torch.ops.aten.zeros_like, torch.ops.aten.fill_,
                                       torch.ops.aten.zero_, torch.ops.aten.new_zeros):
                self.fills.append(func)
            return func(*args, **(kwargs or {}))

    x, w, v, tok = inputs()
    leaves = [t.clone().requires_grad_(True) for t in (x, w, v)]
    y, z = fn(*leaves, tok)
    with CountFills() as counter:
        (y.sum() + z.sum()).backward()
    assert counter.fills == []
    assert all(t.grad is not None for t in leaves)


def test_no_grad_runs_plain_forward(fn):
    x, w, v, tok = inputs()
    with torch.no_grad():
        y, z = fn(x.requires_grad_(True), w, v, tok)
    assert not y.requires_grad and not z.requires_grad
    ry, rz = torch_f(x.detach(), w, v)
    torch.testing.assert_close(y, ry)
    torch.testing.assert_close(z, rz)


def test_frozen_inputs_use_a_smaller_backward_variant(fn):
    full = fn.backward_module((True, True, True)).kernel_count("f_bwd")
    only_x = fn.backward_module((True, False, False))
    assert only_x.kernel_count("f_bwd") < full
    assert fn.backward_module((True, False, False)) is only_x  # cached per mask
    # with w frozen (nn.Parameter with requires_grad=False) the variant computes dx and dv only
    x, w, v, tok = inputs()
    xl, vl = x.clone().requires_grad_(True), v.clone().requires_grad_(True)
    y, z = fn(xl, w, vl, tok)
    (y.sum() + z.sum()).backward()
    _, (dx, dw, dv) = reference_grads(x, w, v, torch.ones(M, N), torch.ones(M, N), torch.float64)
    torch.testing.assert_close(xl.grad.double(), dx, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(vl.grad.double(), dv, rtol=1e-5, atol=1e-5)
    # (mask, donating, handing over): the eager backward hands its saved tensors over and donates
    assert ((True, False, True), True, True) in fn._variants
    assert fn.backward_module((True, False, True)).kernel_count("f_bwd") < full


class Layer(torch.nn.Module):
    """A module calling the op with its parameters (w trainable, v frozen)."""

    def __init__(self, fn, w, v):
        super().__init__()
        self.fn = fn
        self.w = torch.nn.Parameter(w.clone())
        self.v = torch.nn.Parameter(v.clone(), requires_grad=False)

    def forward(self, x, tok):
        y, z = self.fn(x, self.w, self.v, tok)
        return (y * z).sum()


def test_nn_module_with_parameters(fn):
    x, w, v, tok = inputs()
    layer = Layer(fn, w, v)
    xl = x.clone().requires_grad_(True)
    layer(xl, tok).backward()
    ref_x, ref_w = x.clone().double().requires_grad_(True), w.clone().double().requires_grad_(True)
    y, z = torch_f(ref_x, ref_w, v.double())
    (y * z).sum().backward()
    torch.testing.assert_close(layer.w.grad.double(), ref_w.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xl.grad.double(), ref_x.grad, rtol=1e-5, atol=1e-5)
    assert layer.v.grad is None


def test_torch_compile_aot_eager_fullgraph_no_graph_break(fn):
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    x, w, v, tok = inputs()
    layer = Layer(fn, w, v)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    xl = x.clone().requires_grad_(True)
    loss = compiled(xl, tok)
    loss.backward()
    assert not counters["graph_break"], dict(counters["graph_break"])
    eager = Layer(fn, w, v)
    xe = x.clone().requires_grad_(True)
    eager_loss = eager(xe, tok)
    eager_loss.backward()
    torch.testing.assert_close(loss, eager_loss)
    torch.testing.assert_close(layer.w.grad, eager.w.grad)
    torch.testing.assert_close(xl.grad, xe.grad)
    torch._dynamo.reset()


def test_activation_checkpointing(fn):
    x, w, v, tok = inputs()
    leaves = [t.clone().requires_grad_(True) for t in (x, w, v)]

    def block(a, b, c):
        y, z = fn(a, b, c, tok)
        return (y * z).sum()

    torch.utils.checkpoint.checkpoint(block, *leaves, use_reentrant=False).backward()
    plain = [t.clone().requires_grad_(True) for t in (x, w, v)]
    block(*plain).backward()
    for a, b in zip(leaves, plain):
        torch.testing.assert_close(a.grad, b.grad)


def test_fake_tensors_trace_without_running(fn):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(M, N)
        y, z = fn(x, x, x, torch.empty(M, dtype=torch.int32))
    assert y.shape == (M, N) and z.dtype == torch.float32


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda x, tok: (x, x, tok), r"takes 4 tensors .* got 3"),
        (lambda x, tok: (x, x, x[:, :4], tok), r"argument #2 'v' must be 8x16 float32, got 8x4 float32"),
        (lambda x, tok: (x, x.double(), x, tok), r"argument #1 'w' must be 8x16 float32, got 8x16 float64"),
        (lambda x, tok: (x, x, x, tok.long()), r"argument #3 'tok' must be 8 int32, got 8 int64"),
        (lambda x, tok: (x, x, x.to("meta"), tok), r"argument #2 .*meta"),
        (lambda x, tok: (x.to("meta"), x.to("meta"), x.to("meta"), tok.to("meta")), r"argument #0 .*meta tensor"),
        (lambda x, tok: (x, x, x, 3), r"argument #3 'tok' must be a torch.Tensor"),
    ],
)
def test_argument_errors(fn, make, match):
    x, _, _, tok = inputs()
    with pytest.raises(ArgumentError, match=match):
        fn(*make(x, tok))


def test_meta_tensors_refused_by_the_op_itself(fn):
    x = torch.empty(M, N, device="meta")
    with pytest.raises(ArgumentError, match="meta tensor"):
        fn.forward_op(x, x, x, torch.empty(M, dtype=torch.int32, device="meta"))


def test_same_program_twice_shares_ops_and_names_differ_per_program(fn):
    again = coda_ir.torch.function(module_text(), pipeline=UNFUSED)
    assert again.op_name == fn.op_name and again.forward_op is fn.forward_op
    other = coda_ir.torch.function(module_text(), pipeline="nn-to-coda")
    assert other.op_name != fn.op_name


def test_forward_only_function_refuses_grad_without_autodiff():
    text = module_text().split("func.func @f_fwd")[0]
    fn = coda_ir.torch.function(text)
    x, w, v, tok = inputs()
    y, z = fn(x, w, v, tok)
    torch.testing.assert_close(z, torch_f(x, w, v)[1])
    if not fn.differentiable:
        with pytest.raises(ArgumentError, match="requires grad"):
            fn(x.requires_grad_(True), w, v, tok)


README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_example_runs(capsys):
    snippets = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    snippet = next(s for s in snippets if "coda_ir.torch.function(" in s)
    exec(compile(snippet, str(README), "exec"), {})
    errors = [float(v) for v in re.findall(r"max \|coda - float64\| = ([0-9.e+-]+)", capsys.readouterr().out)]
    assert len(errors) == 4 and max(errors) < 1e-3  # dx, dwn, dwgu, dwd of the fp32 MLP


def test_opcheck_schema_fake_and_autograd_registration(fn):
    # torch.library's own checks: schema, fake implementation vs real, autograd, AOT dispatch
    x, w, v, tok = inputs()
    torch.library.opcheck(fn.forward_op, (x, w, v, tok))
    torch.library.opcheck(fn.fwd_op, (x.requires_grad_(True), w.requires_grad_(True), v, tok))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_gradients_match_cpu(fn):
    # The CPU call runs the kernels through Triton's interpreter, which leaves triton.language
    # patched; the CUDA compile that follows failed inside tl.cdiv on the H100 until
    # runtime.triton_mode restored it (tests/lowering/test_runtime_modes.py checks that on CPU).
    x, w, v, tok = inputs()
    cpu = [t.clone().requires_grad_(True) for t in (x, w, v)]
    gpu = [t.cuda().requires_grad_(True) for t in (x, w, v)]
    for leaves, t in ((cpu, tok), (gpu, tok.cuda())):
        y, z = fn(*leaves, t)
        (y * z).sum().backward()
    for a, b in zip(cpu, gpu):
        assert b.grad.device.type == "cuda"
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- real programs
# These use the nn-autodiff pass (f_fwd / f_bwd made by the compiler) on the project's block
# templates at tiny shapes, checked against autograd through coda_ir.reference.


def _generator():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "programs" / "generate.py"
    spec = importlib.util.spec_from_file_location("coda_program_templates", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = module  # its dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module


def tiny_program(kind: str, dt: str) -> str:
    gen = _generator()
    if kind == "llama_block":
        return gen.nn_llama_block(gen.Llama("tiny", m=19, d=32, f=24, hd=16, hq=1, hkv=1, dt=dt))
    if kind == "gpt2_block":
        return gen.nn_gpt2_block(gen.Gpt2("tiny", m=19, d=32, f=48, dt=dt))
    if kind == "lm_head":
        return gen.nn_lm_head(gen.LmHead("tiny", m=19, d=32, v=40, dt=dt))
    raise ValueError(kind)


def differentiable(text: str):
    """The compiled function with its @f_fwd and full @f_bwd compiled up front (a program whose
    backward does not lower fails here, naming the op)."""
    fn = coda_ir.torch.function(text)
    fn.forward_module
    fn.backward_module((True,) * len(fn.float_args))
    return fn


def upstream_for(outs, seed=3):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype) if o.dim() else torch.ones((), dtype=o.dtype) for o in outs]


@pytest.mark.parametrize("kind, dt", [("llama_block", "bf16"), ("gpt2_block", "f32"), ("lm_head", "bf16")])
def test_real_program_gradients_match_reference_autograd(kind, dt):
    from coda_ir.testing import random_inputs

    text = tiny_program(kind, dt)
    fn = differentiable(text)
    assert fn.differentiable and fn.num_saved >= 0
    inputs = random_inputs(text, seed=0)
    leaves = [t.clone().requires_grad_(True) if t.is_floating_point() else t for t in inputs]
    outs = fn(*leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    upstream = upstream_for(outs)
    torch.autograd.backward(outs, upstream)
    grads = [t.grad for t in leaves if t.is_floating_point()]
    names = [a.name for a in fn.args if a.is_float]
    assert_matches(grads, *reference_gradients(text, inputs, upstream), names)


def test_real_program_frozen_weights_drop_gradient_kernels():
    from coda_ir.testing import random_inputs

    text = tiny_program("llama_block", "f32")
    fn = differentiable(text)
    inputs = random_inputs(text, seed=1)
    # only the activations train (frozen weights, as LoRA's base model)
    trainable = {"x0", "y0"}
    leaves = [t.clone().requires_grad_(a.name in trainable) if a.is_float else t for a, t in zip(fn.args, inputs)]
    outs = fn(*leaves)
    upstream = upstream_for(outs)
    torch.autograd.backward(outs, upstream)
    mask = tuple(fn.args[i].name in trainable for i in fn.float_args)
    assert fn.backward_module(mask).kernel_count(fn.bwd_name) < fn.backward_module((True,) * len(fn.float_args)).kernel_count(fn.bwd_name)
    names = [a.name for a in fn.args if a.is_float]
    got = [leaves[i].grad for i in fn.float_args if fn.args[i].name in trainable]
    ref64, refT = reference_gradients(text, inputs, upstream)
    keep = [k for k, n in enumerate(names) if n in trainable]
    assert_matches(got, [ref64[k] for k in keep], [refT[k] for k in keep], [names[k] for k in keep])
    assert all(leaves[i].grad is None for i in fn.float_args if fn.args[i].name not in trainable)


def test_real_loss_under_torch_compile_and_checkpoint():
    import torch._dynamo
    from torch._dynamo.utils import counters

    from coda_ir.testing import random_inputs

    text = tiny_program("lm_head", "f32")
    fn = differentiable(text)

    x, wn, wlm, targets = random_inputs(text, seed=2)

    def loss_of(a, b, c):
        return torch.utils.checkpoint.checkpoint(fn, a, b, c, targets, use_reentrant=False)

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(loss_of, fullgraph=True, backend="aot_eager")
    leaves = [t.clone().requires_grad_(True) for t in (x, wn, wlm)]
    compiled(*leaves).backward()
    assert not counters["graph_break"]
    eager = [t.clone().requires_grad_(True) for t in (x, wn, wlm)]
    fn(*eager, targets).backward()
    for a, b in zip(leaves, eager):
        torch.testing.assert_close(a.grad, b.grad)
    torch._dynamo.reset()


@pytest.mark.parametrize("kind", ["llama_block", "lm_head"])
def test_real_program_without_grad_runs_f(kind):
    from coda_ir.testing import check_against_reference, random_inputs

    text = tiny_program(kind, "bf16")
    fn = coda_ir.torch.function(text)
    assert fn.differentiable and fn.num_saved == len(fn.saved)
    inputs = random_inputs(text, seed=0)
    with torch.no_grad():
        outs = fn(*[t.requires_grad_(True) if t.is_floating_point() else t for t in inputs])
    # NN_DIALECT.md's term for a 0-d result (lm_head's loss), M = all rows: the deferred final
    # norm rounds x * g, independently of the op-by-op program's rounding of h
    check_against_reference(text, [t.detach() for t in inputs], outs, loss=(torch.bfloat16, inputs[0].shape[0]))


def test_real_program_frozen_weights_variant_has_no_weight_gradient_gemms():
    # LoRA-like: only the activations x0, y0 need gradients; the four weight-gradient GEMMs
    # (dy^T @ x) of the block and every norm-weight reduction must be gone from the variant
    text = tiny_program("llama_block", "f32")
    fn = coda_ir.torch.function(text)
    names = [fn.args[i].name for i in fn.float_args]
    mask = tuple(n in ("x0", "y0") for n in names)

    def count(module, op_name):
        return sum(1 for op in module.walk() if op.name == op_name)

    full = fn._backward_variant_ir((True,) * len(mask))
    variant = fn._backward_variant_ir(mask)
    assert count(variant, "nn.gemm") + count(variant, "nn.linear") + count(variant, "nn.matmul") < (
        count(full, "nn.gemm") + count(full, "nn.linear") + count(full, "nn.matmul")
    )
    assert len(list(variant.walk())) < len(list(full.walk()))
    from xdsl.dialects import func as xfunc

    ret = next(op for op in variant.walk() if isinstance(op, xfunc.ReturnOp))
    assert len(ret.operands) == 2


def test_plain_eager_call_skips_the_op_dispatch_with_the_same_bits(fn):
    # plain tensors in eager autograd run @f_fwd through a direct autograd.Function (the custom
    # op's dispatch is host time a training step waits on); the op itself gives the same bits
    x, w, v, tok = inputs(seed=3)
    g = torch.Generator().manual_seed(4)
    dy, dz = torch.randn(M, N, generator=g), torch.randn(M, N, generator=g)
    runs = []
    for call in (lambda *t: fn(*t), lambda *t: fn.fwd_op(*t)[:2]):
        leaves = [t.clone().requires_grad_(True) for t in (x, w, v)]
        y, z = call(*leaves, tok)
        torch.autograd.backward([y, z], [dy, dz])
        runs.append(([y.detach(), z.detach(), *[t.grad for t in leaves]], type(y.grad_fn).__name__))
    (direct, direct_node), (op, op_node) = runs
    assert direct_node.startswith("f_forward") and op_node != direct_node
    for a, b in zip(direct, op):
        assert torch.equal(a, b)


def test_a_dispatch_mode_sees_the_custom_op(fn):
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    x, w, v, tok = inputs()
    leaves = [t.clone().requires_grad_(True) for t in (x, w, v)]
    with Log():
        y, _ = fn(*leaves, tok)
    assert any(fn.op_name.split("::")[1] in name for name in seen), seen
    assert y.shape == (M, N)
