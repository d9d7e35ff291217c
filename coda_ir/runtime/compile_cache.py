"""A disk cache of compiled programs (`RuntimeConfig.compile_cache`, on by default).

A training run compiles one program per unit kind and bucket of token counts (`coda_ir.torch.hf`):
parsing, differentiating, the passes and the Triton printers take 0.3-0.5 s a program (a LLaMA-1B
layer on an H200 host), which a new bucket pays in the middle of training and every run of a script
pays again. A program compiled before is read back instead: its differentiated nn module and each
compiled module (generated source, kernel counts, index checks, the functions taking a sequence
length, the coda IR printed, parsed only where it is inspected).

An entry is keyed by the program's text, the function's name, the pipeline and the compiler itself
(a digest of coda-ir's Python sources and the xDSL and Triton versions), so an edit to the compiler
or another installed version never reads a stale entry. Entries are JSON files under
`RuntimeConfig.cache_dir` / "programs", written atomically; an unreadable or malformed entry is a
miss, an unwritable directory only costs the compile. A cache hit runs no pass, so it emits no
remarks: compiles asking for remarks (`remarks=True`) do not use the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path

from coda_ir.runtime import config as runtime_config


@lru_cache(maxsize=None)
def compiler_digest() -> str:
    """A digest of what compiles a program: coda-ir's sources and the xDSL and Triton versions."""
    import triton
    import xdsl

    import coda_ir

    digest = hashlib.sha256(f"xdsl {getattr(xdsl, '__version__', '?')} triton {triton.__version__}".encode())
    root = Path(coda_ir.__file__).parent
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:24]


def program_key(program: str, name: str, pipeline: object) -> str:
    """The key of `program`'s function `name` compiled with `pipeline` by this compiler."""
    text = f"{compiler_digest()}\n{name}\n{pipeline!r}\n{program}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def enabled() -> bool:
    return runtime_config.current().compile_cache


def _path(key: str, part: str) -> Path:
    from coda_ir.runtime.compiled import cache_dir

    return cache_dir() / "programs" / f"{key}-{part}.json"


def load(key: str, part: str) -> dict | None:
    """The stored `part` of entry `key` (None: a miss, or an entry that cannot be read)."""
    try:
        found = json.loads(_path(key, part).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def store(key: str, part: str, value: dict) -> None:
    """Store `part` of entry `key` (atomically; a directory that cannot be written is skipped)."""
    try:
        path = _path(key, part)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".program.", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(value, f)
        os.replace(tmp, path)
    except OSError:
        pass
