"""Memory budget: how much a compute backend may allocate, checked before it allocates."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from attntrace.errors import MemoryBudgetError
from attntrace.units import format_bytes, parse_size

#: Fraction of the available memory a run may use when no --max-memory is given.
DEFAULT_FRACTION = 0.5


def available_memory() -> int:
    """Bytes that can still be allocated: the system's available memory, or less when a
    cgroup (container) limit or an address-space limit (ulimit -v) leaves less."""
    available = _meminfo_available()
    if available is None:  # not Linux: ask psutil (a 10 ms import, so only here)
        import psutil

        available = int(psutil.virtual_memory().available)
    rooms = [room for room in (_cgroup_room(), _address_space_room()) if room is not None]
    return min([available, *rooms])


def _meminfo_available() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (what psutil reports on Linux), or None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_room() -> int | None:
    """Bytes left under a cgroup v2 memory limit, or None where there is no limit."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        current = Path("/sys/fs/cgroup/memory.current").read_text().strip()
    except OSError:
        return None
    if limit == "max":
        return None
    return max(int(limit) - int(current), 0)


def _address_space_room() -> int | None:
    """Bytes of address space left under ``ulimit -v`` (RLIMIT_AS), or None without a limit."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/statm", encoding="ascii") as f:
            used = int(f.read().split()[0]) * resource.getpagesize()
    except (ImportError, OSError, ValueError, IndexError):
        return None
    return max(limit - used, 0)


#: The --max-memory of the command being run, for checks made far from its options (the
#: declared sizes of input files); None: the default budget.
_GIVEN: ContextVar[int | str | None] = ContextVar("attntrace_max_memory", default=None)


@contextmanager
def given_budget(budget: int | str | None) -> Iterator[None]:
    """Within the block, :func:`file_budget` is ``budget`` (the user's --max-memory, in bytes
    or as typed: it is read by :func:`attntrace.units.parse_size` when first needed).

    >>> with given_budget("1KiB"):
    ...     file_budget()
    (1024, '--max-memory')
    """
    token = _GIVEN.set(budget)
    try:
        yield
    finally:
        _GIVEN.reset(token)


def file_budget() -> tuple[int, str]:
    """The bytes a file may declare, and where that limit comes from: the --max-memory of the
    running command (see :func:`given_budget`), else the default budget."""
    given = _GIVEN.get()
    if given is not None:
        return parse_size(given) if isinstance(given, str) else given, "--max-memory"
    return default_budget(), f"{DEFAULT_FRACTION:.0%} of available memory"


def default_budget() -> int:
    """The budget when the user gives none: a safe fraction of the available memory."""
    return int(available_memory() * DEFAULT_FRACTION)


def check_budget(needed: int, budget: int | None, largest: str, advice: str) -> None:
    """Raise MemoryBudgetError when ``needed`` bytes exceed ``budget`` (default: a safe
    fraction of the available memory)."""
    limit = default_budget() if budget is None else budget
    if needed > limit:
        origin = (
            "--max-memory" if budget is not None else f"{DEFAULT_FRACTION:.0%} of available memory"
        )
        raise MemoryBudgetError(
            f"this trace needs about {format_bytes(needed)} ({largest}) but the budget is "
            f"{format_bytes(limit)} ({origin}); {advice}"
        )
