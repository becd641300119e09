"""``attntrace diff --nproc N``: the user's code run on N ranks, each a sandbox child of
:func:`attntrace.capturing.ranks.run_ranks` (``python -m attntrace.diffing.rank_child``), and
the ranks' tensors handed to :func:`attntrace.diffing.rank_diff.diff_ranks`.

Each child joins the process group (:mod:`attntrace.capturing.rank_setup`), builds NAME as
``trace --nproc`` does, runs it on its x (the seeded x of the config; with ``--cp`` its
contiguous part of the sequence) under capture with every value kept, and writes its x, output,
parameters (a DTensor's local shard) and tensors into ``rank-R.npz`` of the parent's temporary
folder; the lines and names of the tensors come back in its result.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attntrace.config.attention_config import AttentionConfig
from attntrace.config.parallel_layout import ParallelLayout
from attntrace.errors import AttntraceError, CannotTellError, ConfigError

if TYPE_CHECKING:
    import numpy as np

    from attntrace.diffing.rank_diff import RankCapture, RankDiffReport
    from attntrace.diffing.verdict import Read


def rank_layout(
    config: AttentionConfig, nproc: int, typed: Sequence[str]
) -> tuple[ParallelLayout, tuple[Read, ...]]:
    """The layout the N ranks run: ``--tp``/``--cp`` as given, else T = N read from the world
    size (a note says so); the contiguous order of tokens the ranks are handed.

    >>> layout, read = rank_layout(AttentionConfig(), 2, ())
    >>> layout.tp, str(read[0])
    (2, 'tp: from the world size, --nproc 2 (2)')
    """
    from attntrace.diffing.verdict import Read

    given = config.parallel
    if given is None or given.ranks == 1:
        layout = ParallelLayout(tp=nproc, balance=False)
        return layout, (Read("tp", nproc, f"the world size, --nproc {nproc}"),)
    if given.tp > 1 and given.cp > 1:
        raise ConfigError(
            f"diff --nproc takes one of --tp or --cp, got --tp {given.tp} --cp {given.cp}; "
            "diff the two parallelisms one at a time"
        )
    if given.sp:
        raise ConfigError("diff --nproc does not take --sp yet; diff without it")
    if given.ranks != nproc:
        raise ConfigError(
            f"--nproc {nproc} does not match the layout's {given.ranks} ranks "
            f"(--tp {given.tp} --cp {given.cp}); give --nproc {given.ranks}"
        )
    return dataclasses.replace(given, rank=0, balance=False), ()


def diff_nproc(
    text: str,
    init: Sequence[str],
    config: AttentionConfig,
    nproc: int,
    typed: Sequence[str] = (),
    *,
    timeout: float = 60.0,
    budget: int | None = None,
    prints: Any = None,
) -> RankDiffReport:
    """Run TARGET ``text`` on ``nproc`` ranks and diff every rank against the rank view."""
    from attntrace.capturing.ranks import run_ranks
    from attntrace.capturing.sandbox import _encode
    from attntrace.diffing.rank_diff import diff_ranks

    layout, read = rank_layout(config, nproc, typed)
    config = dataclasses.replace(config, parallel=layout)
    single = dataclasses.replace(config, parallel=None)
    with tempfile.TemporaryDirectory(prefix="attntrace-ranks-") as tmp:
        request = {
            "kind": "rank-diff",
            "target": text,
            "init": list(init),
            "config": _encode(dataclasses.asdict(single)),
            "out": tmp,
            "shard": "seq" if layout.cp > 1 else "none",
            "inputs": {"seed": config.seed},
            "typed": sorted(typed),
        }
        runs = run_ranks(
            request, nproc, timeout=timeout, budget=budget, prints=prints, module=__name__
        )
        if runs.line is not None:
            raise RanksFailedError(runs.line)
        _raise_first_error(runs.results)
        try:
            config, sized = _read_sizes(config, runs.results[0], typed)
        except CannotTellError as exc:  # no flag and no argument gives the heads
            return _cannot_tell(config, text, read, exc)
        read = (*read, *sized)
        captures = [_load(Path(tmp), r, result) for r, result in enumerate(runs.results)]
    try:
        return diff_ranks(config, captures, target=text, read=read, explicit=typed)
    except CannotTellError as exc:  # the weights could not be read: a verdict of its own
        return _cannot_tell(config, text, read, exc)


def _cannot_tell(
    config: AttentionConfig, text: str, read: tuple[Read, ...], exc: CannotTellError
) -> RankDiffReport:
    from attntrace.diffing.rank_diff import RankDiffReport
    from attntrace.diffing.verdict import CANNOT_TELL

    return RankDiffReport(config, text, CANNOT_TELL, read=read, cannot_tell=str(exc))


def _raise_first_error(results: Sequence[Any]) -> None:
    """The one line of the rank whose own code raised (not one that waited in a collective on
    it), and which ranks stopped waiting."""
    errors = [(r, x) for r, x in enumerate(results) if isinstance(x, Mapping) and "error" in x]
    if not errors:
        return
    rank, first = next(((r, x) for r, x in errors if not x.get("waiting")), errors[0])
    waited = [str(r) for r, x in errors if r != rank and x.get("waiting")]
    also = f"; rank {', '.join(waited)} stopped in a collective waiting on it" if waited else ""
    raise RanksFailedError(f"{first['error']}{also}")


#: The ``__init__`` arguments that name the whole attention's sizes (not one rank's share).
_SIZE_ARGS = {
    "hidden": ("hidden", "hidden_size", "embed_dim", "d_model", "dim", "n_embd", "hidden_dim"),
    "heads": ("heads", "num_heads", "n_heads", "n_head", "nhead", "num_attention_heads"),
    "kv_heads": ("kv_heads", "num_kv_heads", "n_kv_heads", "num_key_value_heads", "n_kv_head"),
}


def init_sizes(cls: Any, init: Mapping[str, Any]) -> dict[str, int]:
    """The sizes a class was built with, read from its ``__init__``'s arguments (given, else
    their defaults) by their usual names: the whole attention's, as the user wrote them — a
    rank's own attributes (``self.heads = num_heads // world``) hold its share.

    >>> class Attn:
    ...     def __init__(self, embed_dim=64, num_heads=4, kv_heads=None, rank=0): ...
    >>> init_sizes(Attn, {"num_heads": 8})
    {'hidden': 64, 'heads': 8}
    """
    import inspect

    try:
        bound = inspect.signature(cls).bind_partial(**init)
    except (TypeError, ValueError):
        return {}
    bound.apply_defaults()
    out: dict[str, int] = {}
    for field, names in _SIZE_ARGS.items():
        for name in names:
            value = bound.arguments.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                out[field] = value
                break
    return out


def _read_sizes(
    config: AttentionConfig, result: Any, typed: Sequence[str]
) -> tuple[AttentionConfig, tuple[Read, ...]]:
    """The config with the sizes rank 0 read from the user's class where no flag gave them
    (each said in a note); CANNOT TELL when the heads are neither typed nor read."""
    from attntrace.diffing.region import cannot_tell
    from attntrace.diffing.verdict import Read

    sizes = result.get("sizes", {}) if isinstance(result, Mapping) else {}
    source = str(result.get("built", "")) if isinstance(result, Mapping) else ""
    changes = {k: v for k, v in sizes.items() if k not in typed and getattr(config, k) != v}
    if "heads" not in typed and "heads" not in sizes:
        cannot_tell(
            f"the number of heads: {source or 'the code'} names none in its arguments "
            f"(heads, num_heads, n_head …), and a rank's own count is its share",
            "pass --heads H (the whole attention's)",
        )
    if "kv_heads" not in typed and "kv_heads" not in sizes and "heads" in changes:
        changes["kv_heads"] = None  # as many as the heads read
    try:
        config = dataclasses.replace(config, **changes)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (read from {source}); give the sizes with flags") from None
    reads = tuple(Read(k, v, source) for k, v in sizes.items() if k not in typed and k in changes)
    return config, reads


class RanksFailedError(AttntraceError):
    """A rank raised, hung or was killed: the one line of run_ranks (exit 1)."""

    exit_code = 1


def _load(folder: Path, rank: int, result: Any) -> RankCapture:
    """Rank ``rank``'s capture from its ``rank-R.npz`` and the steps' lines in ``result``."""
    import numpy as np

    from attntrace.diffing.rank_diff import RankCapture
    from attntrace.diffing.user_side import UserStep

    if not isinstance(result, Mapping):
        raise RanksFailedError(f"rank {rank} ended without its tensors")
    with np.load(folder / f"rank-{rank}.npz") as z:
        data = {k: z[k] for k in z.files}
    x = data["__x"]
    steps = [UserStep(index=0, name="x", value=x)]
    for i, (name, location, source, role, called) in enumerate(result["steps"], 1):
        steps.append(UserStep(i, name, data[f"s{i - 1}"], location, source, role, called=called))
    params = {k[2:]: v for k, v in data.items() if k.startswith("p:")}
    return RankCapture(rank, x, data["__out"], params, tuple(steps))


# --- the child ---


def _prepare(request: Mapping[str, Any]) -> Callable[[Callable[..., None]], dict[str, Any]]:
    """The child's side: join the group before the clock starts, then run the rank."""
    import torch  # noqa: F401  (loaded before the clock starts)

    from attntrace.capturing.rank_setup import join
    from attntrace.capturing.sandbox import _decode

    rank = join(request)
    config = AttentionConfig(**_decode(request["config"]))
    return lambda stream: _run_rank(request, config, rank)


def _run_rank(request: Mapping[str, Any], config: AttentionConfig, rank: Any) -> dict[str, Any]:
    import numpy as np
    import torch

    from attntrace.capturing.rank_setup import shard_x
    from attntrace.diffing.user_side import UserCodeError, run_user

    module, sizes, built = _build(request, config, rank)
    if "hidden" not in request.get("typed", ()):  # the width the module takes, not 768
        from attntrace.capturing.runner import _width

        if "hidden" not in sizes:
            sizes["hidden"] = _width(module)
        config = dataclasses.replace(config, hidden=sizes["hidden"], heads=1, kv_heads=None)
    x = torch.from_numpy(_seeded_x(config))
    x = shard_x(x, rank)  # (B, S, H), or (B, S/N, H) with --cp
    try:
        with torch.no_grad():
            steps, out = run_user(lambda track: module(track(x)))
    except UserCodeError as exc:  # which rank raised, and whether it waited on another
        return {"error": f"rank {rank.rank}: {exc}", "waiting": _in_collective(exc)}
    arrays: dict[str, Any] = {"__x": x.numpy(), "__out": out}
    arrays |= {f"p:{n}": _local(p) for n, p in module.named_parameters()}
    arrays |= {f"s{i}": s.value for i, s in enumerate(steps)}
    np.savez(Path(request["out"]) / f"rank-{rank.rank}.npz", **arrays)
    steps_seen = [[s.name, s.location, s.source, s.role, s.called] for s in steps]
    return {"steps": steps_seen, "sizes": sizes, "built": built}


def _in_collective(exc: BaseException) -> bool:
    """Whether the code's exception came out of torch.distributed (a peer that ended)."""
    import traceback

    cause = exc.__cause__
    frames = traceback.extract_tb(cause.__traceback__) if cause is not None else []
    return any("torch/distributed" in f.filename.replace("\\", "/") for f in frames)


def _build(
    request: Mapping[str, Any], config: AttentionConfig, rank: Any
) -> tuple[Any, dict[str, int], str]:
    """The rank's module, the sizes its ``__init__`` was given (:func:`init_sizes`) and how it
    was built (``ParallelSelfAttention(num_heads=4)``), for the notes."""
    from attntrace.capturing.runner import (
        TargetError,
        _on_rank,
        build_callable,
        import_target,
        parse_init,
        parse_target,
        user_message,
    )

    spec = parse_target(request["target"])
    if not spec.name:
        raise ConfigError(f"diff needs a NAME in the target, e.g. {request['target']}:Attention")
    obj, _ = import_target(spec)
    try:
        obj, init = _on_rank(obj, parse_init(request["init"]), rank)
        module = build_callable(obj, init, spec.name, {"hidden": config.hidden})
    except AttntraceError:
        raise
    except (Exception, SystemExit) as exc:  # the user's __init__ raised
        raise TargetError(f"building {spec.name} failed: {user_message(exc)}") from None
    if not hasattr(module, "named_parameters"):
        raise ConfigError(
            f"diff --nproc reads each rank's weights from an nn.Module; {spec.name} is not one"
        )
    module.eval()  # dropout off
    sizes = init_sizes(obj, init) if isinstance(obj, type) else {}
    shown = ", ".join(f"{k}={v}" for k, v in parse_init(request["init"]).items())
    return module, sizes, f"{spec.name}({shown})"


def _seeded_x(config: AttentionConfig) -> np.ndarray:
    """The x of the config's seed (as the reference's), float32."""
    import numpy as np

    from attntrace.engine.inputs import random_sources

    return np.ascontiguousarray(random_sources(config)["x"].make(), dtype=np.float32)


def _local(p: Any) -> np.ndarray:
    """A parameter's values on this rank (a DTensor's local shard)."""
    t = p.to_local() if hasattr(p, "to_local") else p
    return t.detach().float().cpu().numpy()  # type: ignore[no-any-return]


if __name__ == "__main__":
    from attntrace.capturing.sandbox import child_main

    child_main(_prepare)
