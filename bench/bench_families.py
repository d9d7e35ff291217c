"""A training step (forward + backward, no optimizer) per Hugging Face model family: coda-ir
(`from_hf`) against HF eager (sdpa), HF + torch.compile and HF + Liger, each family's step limit
(its GEMMs in cuBLAS plus SDPA attention, `bench_model.limit_step`) measured in the same rounds.
For Gemma2 / Gemma3 the limit's attention is plain causal SDPA (no window, no softcap): a looser
bound than their own attention; Gemma2's peers run HF's eager attention (its SDPA path refuses the
softcap).

Families (`--families`, default llama,qwen3,gemma,olmo2; `all`: also mistral, qwen2, phi3,
granite, smollm3, gemma2, gemma3_text, glm4, phi4mini (Phi-4-mini, the phi3 family), over several calls as the caches warm): hand-written 1-3B shapes (`FAMILIES`), random init, `--layers` decoder layers (4), `--batch` x
`--seq` tokens (2 x 4096), bf16 built as `from_pretrained(torch_dtype=bfloat16)` builds it: the
parameters in bf16, the rotary `inv_freq` in fp32 (a `Module.to(bfloat16)` would round it to
bf16, a RoPE no loaded checkpoint has; `info.inv_freq_dtype` records it). A family `from_hf`
refuses (a `coda_ir.CodaError`: a config field it does not implement) is reported as refused,
with the message; a family without a Liger patch (`apply_liger_kernel_to_<family>`) has no
Liger variant, reported as such. Any other failure of a variant is recorded and the others go on.

Per family and variant: median step time (CUDA events, each step from an idle GPU) and its
ratio to the limit, tokens/s, peak memory above the resident model (one warm step), first step
time (compile / autotune), the loss against eager's. Variants run in `--rounds` rounds whose
order rotates (bench/README.md). Also, for llama when `from_hf`'s forward takes an
`attention_mask` (a feature check; 'not supported' otherwise): a padded batch (30% right
padding, 2-D mask) and a packed batch (documents of random lengths, position_ids restarting
at 0 per document), coda-ir against HF eager (HF packed: the same position_ids under sdpa,
which does not mask across documents -- flash-attention packing needs flash_attn -- so it
times the same GEMMs and a causal attention, not the same semantics).

GPU, on the lent H200 (carry [".whl", ".devcache"]; .whl with liger-kernel; the default run
aims at ~8 minutes cold: coda-ir is built first and the baselines of a family it refuses are
skipped (`--baselines-when-refused`), GEMM autotuning is short (`--tune`); `--budget-s` cuts
what does not fit and the JSON always comes out):

    python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl && \
    export PYTHONPATH=$PWD/.site:$PWD CODA_CACHE_DIR=$PWD/.devcache/coda \
      TRITON_CACHE_DIR=$PWD/.devcache/triton TORCHINDUCTOR_CACHE_DIR=$PWD/.devcache/inductor && \
    timeout 570 python3 bench/bench_families.py --out $OUT/families.json
    timeout 570 python3 bench/bench_families.py --families mistral,qwen2,phi3,granite,smollm3 --out $OUT/families-2.json
    timeout 570 python3 bench/bench_families.py --families gemma2,gemma3_text,glm4 --out $OUT/families-3.json

CPU smoke (tests/test_bench_smoke.py): `python bench/bench_families.py --smoke` (tiny shapes of
llama and qwen3 plus a refused family, limit / eager / coda, one round, checks only).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import inspect
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_model import LigerPatches, limit_step, pipelined, sync, timed  # noqa: E402

# Hand-written shapes of 1-3B models of each family (the full models' widths; `--layers` of
# their decoder layers). Keys are HF config fields; `config` / `model` name the classes.
FAMILIES = {
    # LLaMA-3.2-1B
    "llama": dict(config="LlamaConfig", model="LlamaForCausalLM", hidden_size=2048, intermediate_size=8192,
                  num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                  tie_word_embeddings=True, rope_theta=500000.0, rms_norm_eps=1e-5),
    # Qwen3-1.7B (QK-norm)
    "qwen3": dict(config="Qwen3Config", model="Qwen3ForCausalLM", hidden_size=2048, intermediate_size=6144,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                  tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6),
    # a Ministral-3B-like Mistral (no sliding window)
    "mistral": dict(config="MistralConfig", model="MistralForCausalLM", hidden_size=3072, intermediate_size=8192,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=131072,
                    tie_word_embeddings=False, rope_theta=1000000.0, rms_norm_eps=1e-5, sliding_window=None),
    # Qwen2.5-1.5B (q/k/v biases)
    "qwen2": dict(config="Qwen2Config", model="Qwen2ForCausalLM", hidden_size=1536, intermediate_size=8960,
                  num_attention_heads=12, num_key_value_heads=2, head_dim=128, vocab_size=151936,
                  tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6, use_sliding_window=False),
    # Gemma-2B (GeGLU, (1 + w) norms, scaled embedding, MQA of head_dim 256)
    "gemma": dict(config="GemmaConfig", model="GemmaForCausalLM", hidden_size=2048, intermediate_size=16384,
                  num_attention_heads=8, num_key_value_heads=1, head_dim=256, vocab_size=256000,
                  tie_word_embeddings=True, rope_theta=10000.0, rms_norm_eps=1e-6),
    # Phi-3-mini (3.8B; fused qkv and gate_up projections, head_dim 96)
    "phi3": dict(config="Phi3Config", model="Phi3ForCausalLM", hidden_size=3072, intermediate_size=8192,
                 num_attention_heads=32, num_key_value_heads=32, vocab_size=32064, tie_word_embeddings=False,
                 rope_theta=10000.0, rms_norm_eps=1e-5, sliding_window=None),
    # Phi-4-mini (3.8B; fused projections, 96 of each head's 128 columns rotated in half-style
    # pairs (i, i + 48): a pair map with a per-head period; its longrope factors left out: at
    # 4096 positions Hugging Face rotates by the short factors, which only rescale frequencies)
    "phi4mini": dict(config="Phi3Config", model="Phi3ForCausalLM", hidden_size=3072, intermediate_size=8192,
                     num_attention_heads=24, num_key_value_heads=8, vocab_size=200064, tie_word_embeddings=True,
                     rope_theta=10000.0, rms_norm_eps=1e-5, sliding_window=None, partial_rotary_factor=0.75),
    # OLMo-2-1B (norms after attention / MLP, QK-norm over all heads)
    "olmo2": dict(config="Olmo2Config", model="Olmo2ForCausalLM", hidden_size=2048, intermediate_size=8192,
                  num_attention_heads=16, num_key_value_heads=16, vocab_size=100352, tie_word_embeddings=False,
                  rope_theta=500000.0, rms_norm_eps=1e-6),
    # Granite-3.1-2B (embedding / residual / attention multipliers, logits scaling)
    "granite": dict(config="GraniteConfig", model="GraniteForCausalLM", hidden_size=2048, intermediate_size=8192,
                    num_attention_heads=32, num_key_value_heads=8, vocab_size=49155, tie_word_embeddings=True,
                    rope_theta=5000000.0, rms_norm_eps=1e-5, embedding_multiplier=12.0, residual_multiplier=0.22,
                    attention_multiplier=0.015625, logits_scaling=8.0),
    # SmolLM3-3B (no RoPE in every 4th layer)
    "smollm3": dict(config="SmolLM3Config", model="SmolLM3ForCausalLM", hidden_size=2048, intermediate_size=11008,
                    num_attention_heads=16, num_key_value_heads=4, vocab_size=128256, tie_word_embeddings=True,
                    rope_theta=5000000.0, rms_norm_eps=1e-6, use_sliding_window=False),
    # Gemma-2-2B (sliding window 4096 on every other layer, attention-logit softcap 50, final-logit
    # softcap 30, sandwich norms, head_dim 256)
    "gemma2": dict(config="Gemma2Config", model="Gemma2ForCausalLM", hidden_size=2304, intermediate_size=9216,
                   num_attention_heads=8, num_key_value_heads=4, head_dim=256, vocab_size=256000,
                   tie_word_embeddings=True, rope_theta=10000.0, rms_norm_eps=1e-6, sliding_window=4096,
                   query_pre_attn_scalar=256, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                   # HF's SDPA path refuses the attention-logit softcap: its peers run HF's eager attention
                   attn_implementation="eager"),
    # Gemma-3-1B (text): window 512 on five of six layers, QK-norm, RoPE base 1e4 local / 1e6 global;
    # layer_types written out so that a 4-layer run has a global layer too
    "gemma3_text": dict(config="Gemma3TextConfig", model="Gemma3ForCausalLM", hidden_size=1152,
                        intermediate_size=6912, num_attention_heads=4, num_key_value_heads=1, head_dim=256,
                        vocab_size=262144, tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6,
                        sliding_window=512, query_pre_attn_scalar=256,
                        layer_types=["sliding_attention", "sliding_attention", "sliding_attention",
                                     "full_attention"],
                        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}),
    # GLM-4-9B-0414's layer widths (q/k/v biases, fused gate_up, post-norms; RoPE over half of each
    # head, interleaved)
    "glm4": dict(config="Glm4Config", model="Glm4ForCausalLM", hidden_size=4096, intermediate_size=13696,
                 num_attention_heads=32, num_key_value_heads=2, head_dim=128, vocab_size=151552,
                 tie_word_embeddings=False, rope_theta=10000.0, rms_norm_eps=1e-5, partial_rotary_factor=0.5,
                 pad_token_id=None, eos_token_id=None, bos_token_id=None),
}
# a shape named otherwise than its Hugging Face family (the family's Liger patch and module)
FAMILY_OF = {"phi4mini": "phi3"}

# the Liger module a family's patch rewrites, where it is not `modeling_{family}`
LIGER_MODULE = {"gemma3_text": "transformers.models.gemma3.modeling_gemma3"}
SMOKE = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             vocab_size=128, tie_word_embeddings=False, pad_token_id=None, bos_token_id=None, eos_token_id=None)
VARIANTS = ("limit", "eager", "compile", "liger", "coda")
# the default run: LLaMA and Qwen3 (the reference families) and the two whose layers differ most
# from theirs (Gemma: GeGLU, (1 + w) norms, head_dim 256; OLMo2: post-norms, full QK-norm)
DEFAULT_FAMILIES = ("llama", "qwen3", "gemma", "olmo2")
# built in this order: coda first, so that a family from_hf refuses costs no baseline builds
# (torch.compile alone is ~30 s a family) unless --baselines-when-refused
BUILD_ORDER = ("coda", "limit", "eager", "liger", "compile")
# the families whose Liger patch takes geglu instead of swiglu, and those whose fused linear
# cross-entropy Liger's own convergence tests leave off (granite: logits scaling)
LIGER_GEGLU = {"gemma"}
LIGER_NO_FLCE = {"granite"}


@contextlib.contextmanager
def default_dtype(dtype):
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def shape_of(family: str, smoke: bool) -> dict:
    """The family's config fields, with `head_dim` made explicit (the limit needs it)."""
    shape = dict(FAMILIES[family])
    if smoke:
        shape.update(SMOKE)
        for k in ("embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling"):
            shape.pop(k, None)
    shape.setdefault("head_dim", shape["hidden_size"] // shape["num_attention_heads"])
    shape["family"] = family
    return shape


def make_model(shape: dict, layers: int, dtype, device):
    """Random init on `device` in `dtype` the way `from_pretrained(torch_dtype=dtype)` builds it:
    the default dtype set while constructing, so the rotary inv_freq (computed in explicit fp32)
    stays fp32."""
    import transformers

    kw = {k: v for k, v in shape.items() if k not in ("config", "model", "family", "rope_theta", "attn_implementation")}
    if "layer_types" in kw:  # a pattern, repeated over the layers run
        kw["layer_types"] = [kw["layer_types"][i % len(kw["layer_types"])] for i in range(layers)]
    config = getattr(transformers, shape["config"])(num_hidden_layers=layers, **kw)
    if "rope_parameters" in shape:  # per layer type (Gemma3): written out in the shape
        pass
    elif isinstance(getattr(config, "rope_parameters", None), dict):
        config.rope_parameters["rope_theta"] = shape["rope_theta"]
    else:
        config.rope_theta = shape["rope_theta"]
    config._attn_implementation = shape.get("attn_implementation", "sdpa")
    config.use_cache = False
    torch.manual_seed(0)
    with torch.device(device), default_dtype(dtype):
        model = getattr(transformers, shape["model"])(config)
    return model


def inv_freq_dtype(model) -> str | None:
    buf = getattr(getattr(getattr(model, "model", None), "rotary_emb", None), "inv_freq", None)
    return str(buf.dtype) if isinstance(buf, torch.Tensor) else None


class FamilyLigerPatches(LigerPatches):
    """bench_model's install-only-while-running Liger patches, for any family with a patch."""

    def __init__(self, family: str, model):  # noqa: super().__init__ hardcodes LLaMA's arguments
        from liger_kernel import transformers as lt

        family = FAMILY_OF.get(family, family)
        self.module = importlib.import_module(
            LIGER_MODULE.get(family, f"transformers.models.{family}.modeling_{family}"))
        before = dict(vars(self.module))
        apply = getattr(lt, f"apply_liger_kernel_to_{family}")
        kwargs = dict(rope=True, rms_norm=True, cross_entropy=family in LIGER_NO_FLCE,
                      fused_linear_cross_entropy=family not in LIGER_NO_FLCE, model=model)
        kwargs["geglu" if family in LIGER_GEGLU else "swiglu"] = True
        accepted = inspect.signature(apply).parameters
        apply(**{k: v for k, v in kwargs.items() if k in accepted})
        after = dict(vars(self.module))
        self.liger = {k: v for k, v in after.items() if before.get(k) is not v}
        self.plain = {k: before.get(k) for k in self.liger}
        self._set(self.plain)


def liger_patch_missing(family: str) -> str | None:
    try:
        from liger_kernel import transformers as lt
    except ImportError as exc:
        return f"liger_kernel does not import: {exc}"
    family = FAMILY_OF.get(family, family)
    if not hasattr(lt, f"apply_liger_kernel_to_{family}"):
        return f"Liger has no apply_liger_kernel_to_{family}"
    return None


def masks_supported() -> bool:
    """Whether from_hf's forward takes an attention_mask (padded and packed batches)."""
    from coda_ir.torch.hf import CodaCausalLM

    return "attention_mask" in inspect.signature(CodaCausalLM.forward).parameters


# ----------------------------------------------------------------------------- batches


def batch_of(kind: str, vocab: int, batch: int, seq: int, device) -> dict:
    """`input_ids`, `labels` and (padded) `attention_mask` / (packed) `position_ids`."""
    g = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    out = {"input_ids": ids, "labels": ids.clone()}
    if kind == "padded":  # ~30% right padding: rows of 50-90% real tokens
        mask = torch.ones(batch, seq, dtype=torch.int64)
        for r in range(batch):
            real = int(seq * (0.5 + 0.4 * r / max(batch - 1, 1)))
            mask[r, real:] = 0
        out["input_ids"] = ids.masked_fill(mask == 0, 0)
        out["labels"] = ids.masked_fill(mask == 0, -100)
        out["attention_mask"] = mask
    elif kind == "packed":  # documents of random lengths (64 .. seq/2), positions restart at 0
        pos = torch.empty(batch, seq, dtype=torch.int64)
        labels = ids.clone()
        for r in range(batch):
            s = 0
            while s < seq:
                n = min(int(torch.randint(64, max(65, seq // 2), (1,), generator=g)), seq - s)
                pos[r, s:s + n] = torch.arange(n)
                labels[r, s] = -100 if s else labels[r, s]  # no target across a document boundary
                s += n
        out["labels"] = labels
        out["position_ids"] = pos
    return {k: v.to(device) for k, v in out.items()}


# ----------------------------------------------------------------------------- variants


def build_step(name: str, base, shape: dict, layers: int, data: dict, dtype, device):
    """(step closure returning the loss or None, context manager factory)."""
    ctx = contextlib.nullcontext
    tokens, seq = data["input_ids"].numel(), data["input_ids"].shape[1]
    if name == "limit":
        gemms, attention = limit_step(shape, layers, tokens, seq, dtype, device)

        def step():
            gemms()
            attention()
            return None

        return step, ctx
    model = copy.deepcopy(base)
    coda = name.startswith("coda")
    if name == "compile":
        fwd = torch.compile(model)
    elif name == "liger":
        patches = FamilyLigerPatches(shape["family"], model)
        ctx = patches.active
        fwd = model
    elif coda:
        import coda_ir.torch

        fwd = coda_ir.torch.from_hf(model, progress=True)
    else:
        fwd = model
    ids = data["input_ids"]
    kwargs = {k: v for k, v in data.items() if k not in ("input_ids",)}

    def step():
        model.zero_grad(set_to_none=True)
        loss = (fwd(ids, **kwargs) if coda else fwd(input_ids=ids, **kwargs)).loss
        loss.backward()
        return loss.detach()

    return step, ctx


def peak_gib(step, device) -> float | None:
    if device.type != "cuda":
        return None
    sync(device)
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    sync(device)
    return (torch.cuda.max_memory_allocated() - base) / 2**30


def run_case(label: str, family: str, kind: str, variants: list[str], args, device, dtype, deadline: float) -> dict:
    """Build, check (first step) and time every variant of one family and batch kind."""
    shape = shape_of(family, args.smoke)
    report: dict = {"family": family, "batch_kind": kind, "variants": {}}
    try:
        base = make_model(shape, args.layers, dtype, device)
    except Exception as exc:  # this transformers cannot build the config
        report["error"] = f"{type(exc).__name__}: {exc}"[:1000]
        print(f"[{label}] model not built: {report['error'][:200]}", flush=True)
        return report
    report["inv_freq_dtype"] = inv_freq_dtype(base)
    data = batch_of(kind, shape["vocab_size"], args.batch, args.seq, device)
    tokens = data["input_ids"].numel()
    report["tokens"] = tokens
    report["real_tokens"] = int(data["attention_mask"].sum()) if "attention_mask" in data else tokens
    steps = {}
    for name in sorted(variants, key=lambda v: BUILD_ORDER.index(v) if v in BUILD_ORDER else len(BUILD_ORDER)):
        entry = report["variants"].setdefault(name, {})
        if name != "coda" and "refused" in report["variants"].get("coda", {}) and not args.baselines_when_refused:
            entry["skipped"] = "from_hf refuses this family (--baselines-when-refused times the baselines anyway)"
            continue
        if time.perf_counter() > deadline:
            entry["skipped"] = "--budget-s reached before this variant was built"
            continue
        if name == "liger":
            missing = liger_patch_missing(family)
            if missing:
                entry["skipped"] = missing
                print(f"[{label}] liger: skipped ({missing})", flush=True)
                continue
        try:
            step, ctx = build_step(name, base, shape, args.layers, data, dtype, device)
            with ctx():
                sync(device)
                t = time.perf_counter()
                loss = step()
                sync(device)
                entry["first_step_s"] = time.perf_counter() - t
                entry["peak_gib_above_model"] = peak_gib(step, device)
            if loss is not None:
                entry["loss"] = float(loss)
            steps[name] = (step, ctx)
            entry["ms"] = []
            print(f"[{label}] {name}: first step {entry['first_step_s']:.1f} s, loss {entry.get('loss')}", flush=True)
        except Exception as exc:
            from coda_ir import CodaError

            if isinstance(exc, CodaError):
                entry["refused"] = str(exc)[:2000]
                print(f"[{label}] {name}: refused by from_hf: {str(exc)[:300]}", flush=True)
            else:
                entry["error"] = f"{type(exc).__name__}: {exc}"[:2000]
                entry["traceback"] = traceback.format_exc()[-3000:]
                print(f"[{label}] {name}: failed: {entry['error'][:300]}", file=sys.stderr, flush=True)
    order = list(steps)
    for r in range(args.rounds):
        if time.perf_counter() > deadline and r > 0:
            report["rounds_cut"] = f"{r} of {args.rounds} rounds (--budget-s)"
            break
        for name in order[r % len(order):] + order[: r % len(order)] if order else []:
            step, ctx = steps[name]
            with ctx():
                report["variants"][name]["ms"].append(timed(step, device, args.iters))
                if args.pipelined:
                    report["variants"][name].setdefault("pipelined_ms", []).append(pipelined(step, device, args.iters))
    summarize(report, tokens)
    del steps, base
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return report


def summarize(report: dict, tokens: int) -> None:
    v = report["variants"]
    limit = statistics.median(v["limit"]["ms"]) if v.get("limit", {}).get("ms") else None
    eager_loss = v.get("eager", {}).get("loss")
    for entry in v.values():
        if entry.get("ms"):
            entry["median_ms"] = statistics.median(entry["ms"])
            entry["tokens_per_s"] = report.get("real_tokens", tokens) / (entry["median_ms"] / 1e3)
            if limit:
                entry["x_limit"] = entry["median_ms"] / limit
        if eager_loss is not None and "loss" in entry:
            entry["loss_minus_eager"] = entry["loss"] - eager_loss


def print_table(cases: list[dict]) -> None:
    print(f"\n{'family':9} {'batch':7} {'variant':8} {'ms':>9} {'x limit':>8} {'tok/s':>10} {'peak GiB':>9} "
          f"{'first s':>8} {'loss-eager':>11}")
    for case in cases:
        if "error" in case:
            print(f"{case['family']:9} {case['batch_kind']:7} model not built: {case['error'][:80]}")
            continue
        if case.get("not_supported"):
            print(f"{case['family']:9} {case['batch_kind']:7} not supported: {case['not_supported']}")
            continue
        for name, e in case["variants"].items():
            head = f"{case['family']:9} {case['batch_kind']:7} {name:8}"
            if "refused" in e:
                print(f"{head} refused: {e['refused'].splitlines()[0][:90]}")
            elif "skipped" in e:
                print(f"{head} skipped: {e['skipped'][:90]}")
            elif "error" in e:
                print(f"{head} error: {e['error'][:90]}")
            else:
                peak = e.get("peak_gib_above_model")
                print(f"{head} {e.get('median_ms', float('nan')):9.2f} {e.get('x_limit', float('nan')):8.3f} "
                      f"{e.get('tokens_per_s', float('nan')):10.0f} {peak if peak is not None else float('nan'):9.2f} "
                      f"{e.get('first_step_s', float('nan')):8.1f} {e.get('loss_minus_eager', float('nan')):11.2e}")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", default=",".join(DEFAULT_FAMILIES),
                   help=f"comma-separated, or 'all' ({', '.join(FAMILIES)}); default {','.join(DEFAULT_FAMILIES)}: "
                        "what fits one ~8-minute call from cold caches (~1.5-2 min a family: coda-ir's first step "
                        "with its GEMM autotuning, torch.compile's ~30 s)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iters", type=int, default=3, help="timed steps per variant per round")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--no-masks", action="store_true", help="skip llama's padded and packed batches")
    p.add_argument("--baselines-when-refused", action="store_true",
                   help="time eager / compile / Liger / the limit of families from_hf refuses too")
    p.add_argument("--tune", choices=("short", "full", "off"), default="short",
                   help="coda GEMM autotuning (bench_block.set_tuning): short = 3 Hopper tile candidates")
    p.add_argument("--pipelined", action="store_true", help="also time steps back to back (bench_model's pipelined)")
    p.add_argument("--budget-s", type=float, default=480.0,
                   help="wall-time budget (s; 0: none): variants not built by then are skipped, rounds cut (the JSON "
                        "always comes out)")
    p.add_argument("--out", default=None, help="JSON path (default: $OUT/families.json when $OUT is set)")
    p.add_argument("--smoke", action="store_true", help="tiny CPU run through the Triton interpreter, no timing to speak of")
    args = p.parse_args(argv)
    if args.smoke:
        args.layers, args.batch, args.seq, args.rounds, args.iters = 2, 2, 16, 1, 1
        if args.variants == ",".join(VARIANTS):
            args.variants = "limit,eager,coda"
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    families = list(FAMILIES) if args.families == "all" else [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        p.error(f"unknown families {unknown}; known: {', '.join(FAMILIES)}")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    tuning = None
    if device.type == "cuda" and "coda" in variants:
        from bench_block import set_tuning

        tuning = set_tuning(args.tune)
    start = time.perf_counter()
    deadline = start + args.budget_s if args.budget_s and not args.smoke else float("inf")
    import transformers

    info = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
            "torch": torch.__version__, "transformers": transformers.__version__, "layers": args.layers,
            "batch": args.batch, "seq": args.seq, "dtype": str(dtype), "rounds": args.rounds, "iters": args.iters,
            "tuning": tuning}
    with contextlib.suppress(Exception):
        import importlib.metadata as md

        info["liger"] = md.version("liger-kernel")
    cases = []
    plan = [(f, "plain") for f in families]
    if "llama" in families and not args.no_masks:
        plan += [("llama", "padded"), ("llama", "packed")]
    for family, kind in plan:
        label = family if kind == "plain" else f"{family} {kind}"
        if kind != "plain" and not masks_supported():
            cases.append({"family": family, "batch_kind": kind,
                          "not_supported": "from_hf's forward takes no attention_mask (padded / packed batches)"})
            print(f"[{label}] not supported: from_hf's forward takes no attention_mask", flush=True)
            continue
        # a padded batch means the same to every peer (HF's mask); a packed one only to coda-ir
        # and the limit (HF's SDPA path runs the packed rows as one causal sequence each)
        masked_peers = ("limit", "eager", "coda", "liger", "compile") if kind == "padded" else ("limit", "eager", "coda")
        names = variants if kind == "plain" else [v for v in variants if v in masked_peers]
        cases.append(run_case(label, family, kind, names, args, device, dtype, deadline))
        write(args, info, cases, start)
    write(args, info, cases, start)
    print_table(cases)
    return {"info": info, "cases": cases}


def write(args, info: dict, cases: list[dict], start: float) -> None:
    out = args.out or (os.path.join(os.environ["OUT"], "families.json") if os.environ.get("OUT") else None)
    if out:
        info["wall_s"] = time.perf_counter() - start
        Path(out).write_text(json.dumps({"info": info, "cases": cases}, indent=1, default=str))


if __name__ == "__main__":
    main()
