"""Stage 2, the algorithm: multi-head attention written once against the backend interface,
recording one named step per intermediate tensor into a :class:`attntrace.Trace`.

Read in this order: :mod:`~attntrace.engine.attention` (the chain of steps, as in the study
notes), then what it calls: :mod:`~attntrace.engine.masks`, :mod:`~attntrace.engine.rope`,
:mod:`~attntrace.engine.relative` (variants), :mod:`~attntrace.engine.eager` and
:mod:`~attntrace.engine.flash` (how the (S, N) matrices are made), :mod:`~attntrace.engine.inputs`
(seeded x and weights), :mod:`~attntrace.engine.costs` and :mod:`~attntrace.engine.memory`
(FLOPs, bytes, the budget), :mod:`~attntrace.engine.parallel` (threads for blocks).
Nothing here knows about rendering or the command line.
"""
