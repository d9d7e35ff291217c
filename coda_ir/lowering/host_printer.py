"""Print `host.func`s (coda_ir/dialects/triton_host.py) as the Python host functions of the
generated module.

The printer decides nothing: `convert-coda-to-host` chose every argument, allocation, launch
configuration and library call; each op prints as the one statement it stands for, and the
ops that make values used once inside one statement (`host.empty`, `host.tiles`) print as
expressions in it (the lambda of a launch's arguments is its region, printed as one
expression). Its only choices are textual: names (each value's SSA name hint, made unique;
the rebinding `x = x.contiguous()` keeps the name; the launch tuple, the configuration and
the device have the fixed names `_e`, `_cfg`, `_dev`; the row count of a function with
run-time rows `_M`, its sequence-length argument `seq_len`), and the gemm autotune key, which is the
kernel's name and a hash of its printed source (the key identifies the printed text, so only
printing can know it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from xdsl.dialects.builtin import DYNAMIC_INDEX, FloatAttr, IntAttr, IntegerAttr, TensorType
from xdsl.ir import Attribute, Operation, SSAValue

from coda_ir.diagnostics import InternalCompilerBug
from coda_ir.dialects import triton_host as host
from coda_ir.dialects.element_types import TORCH_DTYPE_NAMES, element_name
from coda_ir.dialects.tl_names import KernelNames, gluon_entry_name

IND = "    "

# names the generated module binds at module level or that host functions use as fixed locals
RESERVED = ("torch", "triton", "tl", "os", "launch_gemm", "libdevice", "_rt", "_lib", "_dev", "_cfg", "_e", "_args")


def torch_dtype(elt: Attribute) -> str:
    try:
        return "torch." + TORCH_DTYPE_NAMES[element_name(elt)]
    except (TypeError, KeyError):
        raise InternalCompilerBug(None, f"no torch dtype for {elt}") from None


def _tuple(xs: Sequence[str]) -> str:
    return f"({', '.join(xs)}{',' if len(xs) == 1 else ''})"


def source_digest(source: Sequence[str]) -> str:
    """A hash of a kernel's printed source (the autotune cache key: same name, other epilogue)."""
    return hashlib.sha256("\n".join(source).encode()).hexdigest()[:12]


class HostPrinter:
    def __init__(self, fn: host.FuncOp, sources: Mapping[str, Sequence[str]]):
        self.fn = fn
        self.sources = sources
        kernels = [op.kernel.root_reference.data for op in fn.walk() if isinstance(op, (
            host.LaunchGemmOp, host.LaunchElementwiseOp, host.LaunchFoldOp, host.LaunchGroupOp))]
        kernels += [gluon_entry_name(op.kernel.root_reference.data) for op in fn.walk()
                    if isinstance(op, host.LaunchGemmOp) and op.mainloop is not None]
        # a local must not shadow the function itself or a kernel it launches (nor, with run-time
        # rows, the row count and the sequence-length argument)
        dynamic = ("_M", "seq_len") if fn.arg_rows is not None or fn.seq_len is not None else ()
        self.names = KernelNames([*RESERVED, *dynamic, fn.py_name, *kernels])
        self.exprs: dict[SSAValue, str] = {}
        self.lines: list[str] = []

    # ------------------------------------------------------------------ values
    def name(self, v: SSAValue, default: str = "t") -> str:
        self.exprs[v] = self.names(v.name_hint or default)
        return self.exprs[v]

    def get(self, v: SSAValue) -> str:
        if v not in self.exprs:
            owner = v.owner if isinstance(v.owner, Operation) else None
            if isinstance(owner, (host.EmptyOp, host.TilesOp, host.RowsOp)):
                self.exprs[v] = self.expr(owner)
            else:
                raise InternalCompilerBug(owner, "host value printed before its definition")
        return self.exprs[v]

    def expr(self, op: Operation) -> str:
        if isinstance(op, host.EmptyOp):
            ty = op.result.type
            assert isinstance(ty, TensorType)
            dynamic = iter(op.extents)
            dims = [self.get(next(dynamic)) if d == DYNAMIC_INDEX else str(d) for d in ty.get_shape()]
            return f"torch.empty({_tuple(dims)}, dtype={torch_dtype(ty.get_element_type())}, device={self.get(op.device)})"
        if isinstance(op, host.TilesOp):
            return f"_rt.cdiv({self.size(op.extent)}, {self.get(op.config)}.{op.field.data})"
        if isinstance(op, host.RowsOp):
            return f"{self.get(op.rows)} * {op.per.data}"
        raise InternalCompilerBug(op, f"'{op.name}' is no host expression")

    @staticmethod
    def size(attr: Attribute) -> str:
        """A launch's extent: its value, or `_M` times the multiple (`#host.rows<c>`)."""
        if isinstance(attr, host.RowsAttr):
            return "_M" if attr.per.data == 1 else f"_M * {attr.per.data}"
        assert isinstance(attr, IntAttr)
        return str(attr.data)

    def lambda_(self, op: host.ArgsLambdaLaunch) -> str:
        cfg = op.args.block.args[0]
        self.exprs[cfg] = "_cfg"
        return f"lambda _cfg: {_tuple([self.get(v) for v in op.yielded()])}"

    @staticmethod
    def config_suffix(op: host.ArgsLambdaLaunch) -> tuple[str, str]:
        """(`whole=...`, `config=...`) keyword text of an elementwise launch ('' when absent)."""
        whole = f", whole={op.whole.data!r}" if op.whole is not None else ""  # type: ignore[attr-defined]
        width = op.width_multiple  # type: ignore[attr-defined]
        whole += f", width_multiple={width.data}" if width is not None else ""
        c = op.config  # type: ignore[attr-defined]
        fixed = f", config=_rt.ElementwiseConfig({c.bm.data}, {c.bn.data}, {c.warps.data})" if c is not None else ""
        return whole, fixed

    def elementwise_call(self, op: host.LaunchElementwiseOp | host.ElementwiseSpecOp) -> str:
        whole, fixed = self.config_suffix(op)
        return f"{self.lambda_(op)}, M={self.size(op.m)}, N={self.size(op.n)}, bn_multiple_of={op.bn_multiple_of.data}{whole}{fixed}"

    def fold_call(self, op: host.LaunchFoldOp | host.FoldSpecOp) -> str:
        groups = [_tuple([self.get(v) for v in vs]) for vs in (op.partials, op.inputs, op.outputs)]
        return f"{', '.join(groups)}, L={self.size(op.length)}, sums={bool(op.sums.value.data)}"

    @staticmethod
    def literal(attr: Attribute) -> str:
        if isinstance(attr, host.SeqLenAttr):
            return "seq_len"
        if isinstance(attr, IntAttr):
            return str(attr.data)
        if isinstance(attr, IntegerAttr):
            return str(bool(attr.value.data))
        if isinstance(attr, FloatAttr):
            return repr(float(attr.value.data))
        return torch_dtype(attr)

    def targets(self, values: Sequence[SSAValue], tuple_: bool) -> str:
        names = [self.name(v) for v in values]
        return f"{', '.join(names)}{',' if tuple_ and len(names) == 1 else ''}"

    # ------------------------------------------------------------------ statements
    def emit(self, text: str) -> None:
        self.lines.append(IND + text)

    def statement(self, op: Operation) -> None:
        if isinstance(op, (host.EmptyOp, host.TilesOp, host.RowsOp)):
            return  # printed where it is used
        if isinstance(op, host.CheckArgumentsOp):
            name = self.fn.py_name
            self.emit(f"_rt.check_arguments({name!r}, {_tuple([self.get(a) for a in op.args])}, _SIG_{name})")
        elif isinstance(op, host.DeviceOfOp):
            self.exprs[op.result] = "_dev"
            self.emit(f"_dev = _rt.device_of({_tuple([self.get(a) for a in op.args])})")
        elif isinstance(op, host.RowCountOp):
            self.exprs[op.result] = "_M"
            per = f" // {op.per.data}" if op.per.data != 1 else ""
            self.emit(f"_M = {self.get(op.value)}.shape[{op.dim.data}]{per}")
        elif isinstance(op, host.ContiguousOp):
            x = self.get(op.value)
            self.exprs[op.result] = x
            self.emit(f"{x} = {x}.contiguous()")
        elif isinstance(op, host.CommentOp):
            self.emit(f"# {op.text.data}")
        elif isinstance(op, host.LaunchGemmOp):
            self.exprs[op.result] = "_e"
            kernel = op.kernel.root_reference.data
            if kernel not in self.sources:
                raise InternalCompilerBug(op, f"no printed source of kernel {kernel}")
            fixed = ""
            if op.config is not None:
                c = op.config.as_dict()
                fixed = f"config=_rt.fixed_gemm_config({c['bm']}, {c['bn']}, {c['bk']}, {c['warps']}, {c['stages']}), "
            key = f"{kernel}:{source_digest(self.sources[kernel])}"
            if op.mainloop is not None:
                m = op.mainloop.as_dict()
                fixed += (f"mainloop=_rt.GluonMainloop({gluon_entry_name(kernel)}, {m['bm']}, {m['bn']}, {m['bk']}, "
                          f"{m['stages']}, {m['handoff']!r}, {m['accumulate_first']}), ")
            if op.vendor is not None:
                fixed += f"vendor={op.vendor.library.data!r}, "
            rows = "".join(d for d, size in (("M", op.m), ("N", op.n), ("K", op.k)) if isinstance(size, host.RowsAttr))
            if rows:  # run-time row extents: tuned per bucket
                fixed += f"row_extents={rows!r}, "
            self.emit(
                f"_cfg, _e = launch_gemm({kernel}, {self.get(op.a)}, {self.get(op.b)}, {self.lambda_(op)}, "
                f"M={self.size(op.m)}, N={self.size(op.n)}, K={self.size(op.k)}, transpose_a={op.transpose_a is not None}, "
                f"transpose_b={op.transpose_b is not None}, interleave={op.interleave.data}, "
                f"bn_multiple_of={op.bn_multiple_of.data}, {fixed}key={key!r}, "
                f"tuning_group='epilogue-half-tiles={op.epilogue_half_tiles.data}')"
            )
        elif isinstance(op, host.LaunchElementwiseOp):
            self.exprs[op.result] = "_e"
            self.emit(f"_cfg, _e = _rt.launch_elementwise({op.kernel.root_reference.data}, {self.elementwise_call(op)})")
        elif isinstance(op, host.ElementwiseSpecOp):
            call = self.elementwise_call(op)
            self.emit(f"{self.name(op.result, '_g')} = _rt.elementwise_launch({call}, n_inputs={op.n_inputs.data})")
        elif isinstance(op, host.LaunchFoldOp):
            self.exprs[op.result] = "_e"
            self.emit(f"_e = _rt.launch_fold({op.kernel.root_reference.data}, {self.fold_call(op)})")
        elif isinstance(op, host.FoldSpecOp):
            call = self.fold_call(op)
            self.emit(f"{self.name(op.result, '_g')} = _rt.fold_launch({call})")
        elif isinstance(op, host.LaunchGroupOp):
            self.emit(f"_rt.launch_group({op.kernel.root_reference.data}, {_tuple([self.get(s) for s in op.specs])})")
        elif isinstance(op, host.UnpackOp):
            source = self.get(op.tuple)
            # a launch's argument tuple is sliced from its first output (`_e[0:]` when the kernel
            # has no inputs), a fold's tuple of outputs is unpacked whole
            if isinstance(op.tuple.owner, (host.LaunchGemmOp, host.LaunchElementwiseOp)) or op.start.data:
                source = f"{source}[{op.start.data}:]"
            self.emit(f"{self.targets(op.res, True)} = {source}")
        elif isinstance(op, host.ResultsOp):
            spec = self.get(op.spec)
            self.emit(f"{self.targets(op.res, True)} = {spec}.results")
        elif isinstance(op, host.LibraryCallOp):
            tensors = [self.get(v) for v in op.tensors]
            args = [f"[{', '.join(tensors)}]"] if op.list_operands is not None else tensors
            args += [self.literal(lit) for lit in op.literals.data]
            call = f"_lib.{op.callee.data}({', '.join(args)})"
            self.emit(f"{self.targets(op.res, False)} = {call}")
        elif isinstance(op, host.DropOp):
            self.emit(f"del {', '.join(self.get(v) for v in op.values)}")
        elif isinstance(op, host.ReturnOp):
            results = [self.get(v) for v in op.values]
            if not results:
                self.emit("return None")
            elif len(results) == 1:
                self.emit(f"return {results[0]}")
            else:
                self.emit(f"return ({', '.join(results)})")
        else:
            raise InternalCompilerBug(op, f"'{op.name}' cannot be printed as a host statement")

    # ------------------------------------------------------------------ function
    def print(self) -> list[str]:
        fn = self.fn
        name = fn.py_name
        block = fn.body.block
        params = [self.name(a, f"arg{i}") for i, a in enumerate(block.args)]
        sig = []
        for i, (p, a) in enumerate(zip(params, block.args)):
            ty = a.type
            assert isinstance(ty, TensorType)
            if fn.arg_rows is None:
                shape = repr(tuple(ty.get_shape()))
            else:  # a row extent: `_rt.Rows(c)`, any c * M (the check takes M from the first)
                dims = [f"_rt.Rows({c})" if c else str(d) for c, d in zip(fn.rows_of(i), ty.get_shape())]
                shape = _tuple(dims)
            sig.append(f"({p!r}, {shape}, {torch_dtype(ty.get_element_type())})")
        # the sequence length of the attention calls: a keyword argument
        sizes = ", *, seq_len" if fn.seq_len is not None else ""
        declared = [f"_SEQ_LEN_{name} = True"] if fn.seq_len is not None else []
        if fn.takes_list:
            # the caller hands its references over in a list, emptied here: from now on these
            # locals are the only references the caller gave, and `del` of one can free it
            owned = sorted(fn.owned_indices())
            head = [f"_SIG_{name} = {_tuple(sig)}", f"_OWNED_{name} = {_tuple([str(i) for i in owned])}", *declared, "", "",
                    f"def {name}(_args{sizes}):",
                    f'{IND}"""Host function for @{name}: {fn.launches.data} kernel launch(es); takes its arguments '
                    f'in a list, which it empties (owns arguments {owned})."""',
                    f"{IND}{', '.join(params)}{',' if len(params) == 1 else ''} = _args",
                    f"{IND}_args.clear()"]
        else:
            head = [f"_SIG_{name} = {_tuple(sig)}", *declared, "", "", f"def {name}({', '.join(params)}{sizes}):",
                    f'{IND}"""Host function for @{name}: {fn.launches.data} kernel launch(es)."""']
        for op in block.ops:
            self.statement(op)
        return head + self.lines


def print_host_function(fn: host.FuncOp, sources: Mapping[str, Sequence[str]]) -> list[str]:
    """The Python source lines of one `host.func` (`sources`: the printed kernels, by name)."""
    return HostPrinter(fn, sources).print()
