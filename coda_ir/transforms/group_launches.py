"""`coda-group-launches`: independent small kernels share one GPU launch.

A small kernel (`coda.elementwise`, `coda.fold`: a norm fold, a per-weight GEMV) often does
little work, so its launch costs about as much as its memory traffic. Two small kernels with no
data dependence between them can run as one launch: one `@triton.jit` kernel whose program-id
range is split among the members (see `coda.launch_group`).

Per function, in program order, each small kernel K joins the nearest earlier group G that
* K can move up to: every operand of K is a function argument or is defined before G's first
  kernel. K then depends on no member of G (members sit at or after the first) and on nothing
  between G and K's old place, directly or through other ops; or
* can move down to K: every user of G's results sits after K. Then K (a user) does not read
  G, and G's operands, defined before G, still dominate.
Either move keeps SSA dominance and the program's values (kernels are pure functions of their
tensors). A kernel that joins no group starts one. Groups of two or more kernels become a
`coda.launch_group` where their members now sit (adjacent); its results replace the members'.

Option `hoist=false` only groups small kernels that are already adjacent (nothing moves).

Example: in the GPT-2 block, the per-weight LayerNorm GEMVs (`c = W g`, `e = W b`, from
function arguments only) join the LayerNorm statistics folds: 8 launches become 6.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from coda_ir.dialects import coda


def _available_before(value: SSAValue, leader: Operation) -> bool:
    """Whether `value` is defined before `leader` in the leader's block (arguments are)."""
    block = leader.parent_block()
    if isinstance(value, BlockArgument):
        return value.block is block
    owner = value.owner
    return isinstance(owner, Operation) and owner.parent_block() is block and owner.is_before_in_block(leader)


def _top_level(op: Operation, block: Block) -> Operation | None:
    while op is not None and op.parent_block() is not block:
        op = op.parent_op()  # type: ignore[assignment]
    return op


def _used_only_after(group: list[Operation], op: Operation) -> bool:
    """Whether every user of the group's results sits after `op` (so the group can move down
    to just before `op`, which then does not depend on it either)."""
    block = op.parent_block()
    assert block is not None
    for member in group:
        for result in member.results:
            for use in result.uses:
                user = _top_level(use.operation, block)
                if user is None or user is op or not op.is_before_in_block(user):
                    return False
    return True


def plan_groups(block: Block, hoist: bool = True) -> list[list[Operation]]:
    """The groups of small kernels of `block` (two or more each). A kernel joins the nearest
    earlier group that it can move up to (it reads nothing defined at or after the group's
    first member), or that can move down to it (nothing before it uses the group's results);
    the members end up adjacent."""
    groups: list[list[Operation]] = []
    for op in list(block.ops):
        if not isinstance(op, coda.SMALL_KERNEL_OPS):
            continue
        joined = False
        for group in reversed(groups):  # the nearest group: kernels move as little as possible
            adjacent = op.prev_op is group[-1]
            if (hoist or adjacent) and all(_available_before(v, group[0]) for v in op.operands):
                if not adjacent:  # move the kernel up, after the group's last member
                    op.detach()
                    block.insert_op_after(op, group[-1])
                group.append(op)
                joined = True
                break
            if hoist and _used_only_after(group, op):  # move the group down, before the kernel
                for member in group:
                    member.detach()
                    block.insert_op_before(member, op)
                group.append(op)
                joined = True
                break
        if not joined:
            groups.append([op])
    return [g for g in groups if len(g) >= 2]


class GroupSmallKernels(RewritePattern):
    def __init__(self, hoist: bool = True):
        self.hoist = hoist

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: func.FuncOp, rewriter: PatternRewriter) -> None:
        if not op.body.blocks:
            return
        block = op.body.blocks[0]
        for members in plan_groups(block, self.hoist):
            values = [r for m in members for r in m.results]
            group = coda.LaunchGroupOp([v.type for v in values], Region(Block()))
            group.location = members[0].location
            rewriter.insert(group, InsertPoint.before(members[0]))
            for old, new in zip(values, group.outputs):
                new.name_hint = old.name_hint
                rewriter.replace_all_uses_with(old, new)
            inner = group.body.blocks[0]
            for member in members:
                member.detach()
                inner.add_op(member)
            inner.add_op(coda.YieldOp(*values))
            rewriter.notify_op_modified(op)


@dataclass(frozen=True)
class GroupLaunchesPass(ModulePass):
    """Group independent small kernels (coda.elementwise, coda.fold) into `coda.launch_group`s."""

    name = "coda-group-launches"

    hoist: bool = True
    """Move a small kernel up to an earlier group when nothing it reads is defined after the
    group's first kernel; off: only kernels already adjacent are grouped."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GroupSmallKernels(self.hoist), apply_recursively=False).rewrite_module(op)
