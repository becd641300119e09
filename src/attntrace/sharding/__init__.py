"""Attention across devices (issue 43): one rank's steps under tensor, sequence and context
parallelism, the collectives as steps of their own, and what each rank holds and moves.

The stages, in the order data moves through them:

1. ``config/parallel_layout.py`` (not here): the layout, checked against the sizes;
2. :mod:`.comm`: the collectives (shapes alone, or tensors exchanged between threads);
3. :mod:`.rank`, :mod:`.context`: one rank's chain, Megatron's split of the heads and the
   context-parallel attention (ring, allgather, ulysses);
4. :mod:`.figures`: the rank's cost and traffic beside the single device;
5. :mod:`.simulate`: every rank run, the output gathered and compared, a
   :class:`~attntrace.trace.Trace` of the shown rank.
"""

from attntrace.sharding.simulate import trace_parallel

__all__ = ["trace_parallel"]
