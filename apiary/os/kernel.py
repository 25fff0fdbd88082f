"""The Apiary kernel of a design: its service tiles, and a monitor for every untrusted tile.

::

    d = Design("apiary_demo", cols=4, rows=3, width=64)
    kernel = Kernel(d, manager=(3, 0), errors=(3, 1), memories={"mem0": ((3, 2), 1 << 16)})
    d.add("app", MyAccelerator, at=(1, 1), trusted=False)
    d.allow("app", "udp_tx")
    kernel.limit("app", RateLimit(burst=64, refill=1, period=2))

:class:`Kernel` adds the memory manager (``mm``), the error manager (``errors``) and the memory
tiles to the design, all trusted, and becomes the design's ``guard``: at elaboration every
untrusted tile gets a :class:`~apiary.os.monitor.Monitor` holding the IPC capabilities the design
grants it (``Design.allow``) and lets in what the design routes to it.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..design import Design, DesignError, Route, where_declared
from ..noc.header import Fbits
from ..tile import TileEnv
from .error_manager import ErrorManagerTile
from .memory_manager import MemoryManagerTile
from .memory_tile import MemoryTile
from .monitor import Monitor, MonitorConfig, RateLimit
from .paging import PagePool, PageRange
from .uapi import Perm


__all__ = ["Kernel"]


class Kernel:
    """The Apiary kernel of ``design`` (see the module docstring).

    Parameters
    ----------
    design : Design
    manager, errors : (x, y)
        Where the memory manager and the error manager sit.
    memories : mapping of str to ((x, y), size_bytes)
        The memory tiles, by name; the manager owns all of their memory.
    monitor : MonitorConfig
        Table sizes (and rate limit) of every monitor, unless :meth:`limit` or
        :meth:`configure` says otherwise for a tile.
    block_bytes : int
        The smallest allocation.
    bram : bool
        The memory tiles keep their memory on chip (``MemoryTile(bram=True)``) instead of
        behind a memory port (DRAM on a board, a model in simulation).
    log_depth : int
        Faults the error manager keeps.
    max_holders : int
        Capabilities sent (``CAP_SEND``) the memory manager keeps track of, to revoke them when
        their segment is freed.
    placement : str
        Which memory an allocation goes to: ``"first"`` with room, or ``"rotate"`` among them
        (:class:`~apiary.os.memory_manager.MemoryManagerTile`).
    names : mapping
        Tile names of the manager and error manager (``{"manager": "mm", "errors":
        "errors"}``).
    """

    def __init__(self, design: Design, *, manager: tuple[int, int], errors: tuple[int, int],
                 memories: Mapping[str, tuple[tuple[int, int], int]],
                 monitor: MonitorConfig | None = None, block_bytes: int = 256,
                 log_depth: int = 64, names: Mapping[str, str] | None = None,
                 bram: bool = False, max_holders: int = 16, placement: str = "first") -> None:
        where = where_declared(2)
        if not isinstance(design, Design):
            raise DesignError(f"Kernel ({where}) needs a Design, not {design!r}.")
        if design.guard is not None:
            raise DesignError(f"design {design.name!r} already has a kernel ({where}).")
        self.monitor_config = monitor if monitor is not None else MonitorConfig()
        if not isinstance(self.monitor_config, MonitorConfig):
            raise DesignError(f"Kernel ({where}): monitor= must be a MonitorConfig, not "
                              f"{monitor!r}.")
        names = {"manager": "mm", "errors": "errors", **(names or {})}
        self.design = design
        self.manager_name = names["manager"]
        self.errors_name = names["errors"]
        self.memory_names = list(memories)
        self._configs: dict[str, MonitorConfig] = {}
        self._trusted_sources: list[str] = []
        places = []
        for name, spec in memories.items():
            try:
                (x, y), size = spec
            except (TypeError, ValueError):
                raise DesignError(f"Kernel ({where}): memory {name!r} must be given as "
                                  f"((x, y), size_bytes), not {spec!r}.") from None
            design.add(name, MemoryTile, at=(x, y), size_bytes=size,
                       **({"bram": True} if bram else {}))
            places.append((x, y, size))
        design.add(self.manager_name, MemoryManagerTile, at=manager, memories=places,
                   block_bytes=block_bytes, max_holders=max_holders, placement=placement,
                   **({"paging": True} if self.monitor_config.tlbs else {}))
        self._block_bytes = block_bytes
        design.add(self.errors_name, ErrorManagerTile, at=errors, log_depth=log_depth)
        design.guard = self

    def __repr__(self) -> str:
        configs = sorted((k, repr(v)) for k, v in self._configs.items())
        return (f"Kernel({self.manager_name!r}, {self.errors_name!r}, {self.memory_names!r}, "
                f"{self.monitor_config!r}, {configs!r}, {self._trusted_sources!r})")

    def configure(self, tile: str, config: MonitorConfig) -> None:
        """Give the monitor of ``tile`` its own table sizes and rate limit."""
        if not isinstance(config, MonitorConfig):
            raise DesignError(f"configure({tile!r}): a MonitorConfig, not {config!r}.")
        self._configs[tile] = config
        if config.tlbs:
            self.design.tiles[self.manager_name].params["paging"] = True

    def map_pages(self, tile: str, size: int, *, vaddr: int = 0, page_bits: int = 12,
                  perm: Perm = Perm.RW, memory: str | None = None) -> PageRange:
        """Give ``tile`` (untrusted, its monitor translating by pages: ``MonitorConfig(tlbs=
        ...)``) ``size`` bytes of ``2**page_bits``-byte pages at virtual address ``vaddr``
        (page aligned), with ``perm``, in ``memory`` (default: the first). The pages are taken
        from the top of that memory, which the allocator of segments then no longer hands out;
        the memory manager answers the monitor's TLB misses from them (apiary/os/paging.py)."""
        return _map_pages(self, tile, size, vaddr, page_bits, perm, memory, where_declared(2))

    def page_pool(self, pages: int, *, page_bits: int = 12, memory: str | None = None,
                  entries: int = 8) -> PagePool:
        """Reserve ``pages`` frames of ``2**page_bits`` bytes at the top of ``memory`` (default:
        the first) for pages mapped at run time: a trusted tile sends the memory manager
        ``PAGE_MAP`` (frame ``root`` of the pool at a paged tile's virtual page) and
        ``PAGE_UNMAP``; the manager keeps ``entries`` such maps (apiary/os/paging.py)."""
        what = f"page_pool ({where_declared(2)})"
        manager = self.design.tiles[self.manager_name].params
        if manager.get("pool") is not None:
            raise DesignError(f"{what}: design {self.design.name!r} has a page pool already.")
        index = _memory_index(self, memory, page_bits, what)
        if not isinstance(pages, int) or not 1 <= pages <= 1 << 16:
            raise DesignError(f"{what}: pages must be 1 to 65536 frames, not {pages!r}.")
        if not isinstance(entries, int) or not 1 <= entries <= 64:
            raise DesignError(f"{what}: entries must be 1 to 64, not {entries!r}.")
        x, y, left = manager["memories"][index]
        page = 1 << page_bits
        base = (left - pages * page) & ~(page - 1)
        if base < self._block_bytes:
            raise DesignError(f"{what}: memory {self.memory_names[index]!r} has {left} bytes "
                              f"left; {pages} frames of {page} bytes do not fit.")
        pool = PagePool(mem=index, base=base, pages=pages, page_bits=page_bits)
        memories = list(manager["memories"])
        memories[index] = (x, y, base)
        manager.update(memories=memories, pool=pool, map_entries=entries, paging=True)
        return pool

    def limit(self, tile: str, rate: RateLimit) -> None:
        """Rate-limit the sends of ``tile`` (a token bucket in its monitor)."""
        if not isinstance(rate, RateLimit):
            raise DesignError(f"limit({tile!r}): a RateLimit, not {rate!r}.")
        base = self._configs.get(tile, self.monitor_config)
        self._configs[tile] = dataclasses.replace(base, rate=rate)

    def config_of(self, tile: str) -> MonitorConfig:
        return self._configs.get(tile, self.monitor_config)

    def trust(self, *tiles: str) -> None:
        """Let monitors take kernel messages (``IPC_GRANT``, ``RELEASE``) from these trusted
        tiles too, besides the manager, the error manager and the memory tiles: a control
        service such as :class:`beehive.apps.kernel_ctl.KernelCtlTile`."""
        self._trusted_sources.extend(tiles)

    def kernel_tiles(self) -> list[str]:
        return [self.manager_name, self.errors_name, *self.memory_names, *self._trusted_sources]

    def routes(self, design: Design) -> list[Route]:
        """The kernel's own traffic, for the layout's deadlock check and the routers: every
        untrusted tile's monitor to and from the memory tiles, the memory manager and the error
        manager; every trusted source (:meth:`trust`) to each monitor (``IPC_GRANT``) and to
        and from the error manager (``RELEASE``, ``FAULT_READ`` and its answer), and with a
        :meth:`page_pool` to and from the memory manager (``PAGE_MAP``, ``PAGE_UNMAP``)."""
        def route(src: str, dst: str) -> Route:
            return Route(src, dst, ("kernel", dst), "data", Fbits.LOCAL0, "kernel")
        out = []
        services = [self.manager_name, self.errors_name, *self.memory_names]
        for name in design.untrusted():
            for service in services:
                out += [route(name, service), route(service, name)]
        pool = design.tiles[self.manager_name].params.get("pool") is not None
        for source in self._trusted_sources:
            out += [route(source, self.errors_name), route(self.errors_name, source)]
            if pool:
                out += [route(source, self.manager_name), route(self.manager_name, source)]
            out += [route(source, name) for name in design.untrusted() if name != source]
        return out

    def monitor(self, design: Design, name: str, env: TileEnv) -> Any:
        """The monitor of untrusted tile ``name`` (called by the design's elaboration)."""
        tiles = design.tiles
        ipc_out, ipc_in = design.ipc_caps(name)
        kernel = [tiles[n].at for n in self.kernel_tiles() if n in tiles]
        _check_pages(self, name)
        return Monitor(env, self.config_of(name), ipc_out=ipc_out, ipc_in=ipc_in,
                       kernel=kernel, manager=tiles[self.manager_name].at,
                       errors=tiles[self.errors_name].at)


def _memory_index(kernel: Kernel, memory: str | None, page_bits: object, what: str) -> int:
    """The index of the kernel memory ``memory`` (default: the first), pages of ``page_bits``
    being taken from it; a DesignError naming ``what`` if either is wrong."""
    memory = kernel.memory_names[0] if memory is None else memory
    if memory not in kernel.memory_names:
        raise DesignError(f"{what}: no kernel memory {memory!r} (have "
                          f"{kernel.memory_names}).")
    if not isinstance(page_bits, int) or not 12 <= page_bits <= 30:
        raise DesignError(f"{what}: page_bits must be 12 to 30, not {page_bits!r}.")
    return kernel.memory_names.index(memory)


def _map_pages(kernel: Kernel, tile: str, size: int, vaddr: int, page_bits: int, perm: Perm,
               memory: str | None, where: str) -> PageRange:
    """:meth:`Kernel.map_pages`: check, take the frames from the top of the memory, tell the
    memory manager."""
    design = kernel.design
    what = f"map_pages({tile!r}) ({where})"
    if tile not in design.tiles or design.tiles[tile].trusted:
        raise DesignError(f"{what}: {tile!r} is not an untrusted tile of design "
                          f"{design.name!r}; add it with trusted=False first.")
    index = _memory_index(kernel, memory, page_bits, what)
    page = 1 << page_bits
    if not isinstance(size, int) or size < 1 or not isinstance(vaddr, int) or vaddr % page \
            or not 0 <= vaddr < vaddr + size <= 1 << 48:
        raise DesignError(f"{what}: size {size!r} at vaddr {vaddr!r} must be a positive "
                          f"size at a page-aligned ({page}-byte) 48-bit address.")
    manager = design.tiles[kernel.manager_name].params
    x, y, left = manager["memories"][index]
    span = -(-size // page) * page
    base = (left - span) & ~(page - 1)
    if base < kernel._block_bytes:
        raise DesignError(f"{what}: memory {kernel.memory_names[index]!r} has {left} bytes "
                          f"left below the pages already given; {span} bytes of {page}-byte "
                          f"pages do not fit.")
    rng = PageRange(*design.tiles[tile].at, vaddr=vaddr, size=span, page_bits=page_bits,
                    mem=index, base=base, perm=int(perm))
    for other in manager.get("pages", []):
        if other.tile_x == rng.tile_x and other.tile_y == rng.tile_y \
                and other.vaddr < vaddr + span and vaddr < other.vaddr + other.size:
            raise DesignError(f"{what}: [{vaddr:#x}, {vaddr + span:#x}) overlaps pages "
                              f"{tile!r} was already given.")
    memories = list(manager["memories"])
    memories[index] = (x, y, base)
    manager.update(memories=memories, pages=[*manager.get("pages", []), rng], paging=True)
    return rng


def _check_pages(kernel: Kernel, tile: str) -> None:
    """The pages ``tile`` was given must be of a size its monitor has a TLB for."""
    at = kernel.design.tiles[tile].at
    sizes = {t.page_bits for t in kernel.config_of(tile).tlbs}
    for r in kernel.design.tiles[kernel.manager_name].params.get("pages", []):
        if (r.tile_x, r.tile_y) == at and r.page_bits not in sizes:
            raise DesignError(f"tile {tile!r} was given {1 << r.page_bits}-byte pages "
                              f"(map_pages) but its monitor has no TLB of that page size "
                              f"(MonitorConfig(tlbs=...) has {sorted(1 << b for b in sizes)}).")
