"""Bridge a simulated design's Ethernet port to a Linux TAP device.

Frames the kernel sends out of the TAP device enter the design's ``mac_rx``; frames the design
sends on ``mac_tx`` are written to the TAP device, so that ping, sockets and netcat on the Linux
side talk to the simulated hardware. Needs ``/dev/net/tun`` and CAP_NET_ADMIN (root), typically
inside a network namespace: ``ip netns exec NS apiary sim DESIGN --tap tap0``.
"""

import errno
import fcntl
import os
import select
import signal
import struct
import time

from .core import SimError
from .impair import Impairment


__all__ = ["TapDevice", "TapBridge", "DEFAULT_IDLE_HZ"]

_TUNSETIFF = 0x400454CA
_IFF_TAP = 0x0002
_IFF_NO_PI = 0x1000
_MAX_FRAME = 65536


class TapDevice:
    """A TAP device opened (and created, if missing) by name; frames without FCS or preamble."""

    def __init__(self, name):
        if not name or len(name.encode()) > 15:
            raise SimError(f"TAP device name {name!r} must be 1 to 15 characters")
        try:
            self.fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
        except OSError as e:
            raise SimError(f"cannot open /dev/net/tun: {e.strerror} (is the tun module "
                           f"present?)") from None
        try:
            fcntl.ioctl(self.fd, _TUNSETIFF,
                        struct.pack("16sH", name.encode(), _IFF_TAP | _IFF_NO_PI))
        except OSError as e:
            os.close(self.fd)
            hint = " (TAP devices need root or CAP_NET_ADMIN)" if e.errno == errno.EPERM else ""
            raise SimError(f"cannot attach to TAP device {name!r}: {e.strerror}{hint}") from None
        self.name = name

    def read_frames(self, limit=256):
        """Every frame waiting on the device (at most ``limit``), without blocking."""
        frames: list[bytes] = []
        while len(frames) < limit:
            try:
                frames.append(os.read(self.fd, _MAX_FRAME))
            except BlockingIOError:
                break
        return frames

    def write_frame(self, frame):
        try:
            os.write(self.fd, frame)
            return True
        except OSError:          # the interface is down or the kernel refused the frame
            return False

    def wait(self, timeout):
        select.select([self.fd], [], [], timeout)

    def close(self):
        os.close(self.fd)


#: Simulated cycles per wall-clock second while a bridged design is idle, by back end, when
#: neither the bridge's ``idle_hz`` nor the design's ``settings["idle_hz"]`` says. An upper
#: bound: the time spent simulating is not counted as waiting, so a design advances only as fast
#: as the back end runs it (the 64-bit ``udp_echo_ctl`` bridge was at cycle 211,013 on its first
#: 5-second stats line, 2026-11-30). The design's own clock (125 MHz at 64 bits) is out of
#: reach: simulated timers run many times slower than on a board.
DEFAULT_IDLE_HZ = {"verilator": 1_000_000, "pysim": 200}


class TapBridge:
    """Move frames between a :class:`~apiary.sim.Sim` and a :class:`TapDevice` until stopped.

    Each step takes every frame the kernel has sent, simulates ``step_cycles`` cycles (or until
    the design is idle), and writes back what the design sent. When nothing happens it sleeps on
    the device. ``log`` receives one line per event worth telling.

    ``impair`` (an :class:`~apiary.sim.impair.Impairment`) makes the link lossy: frames from the
    kernel pass its ``to_design`` direction before they enter the design, frames the design sends
    its ``from_design`` direction before they reach the kernel. A frame held back for
    reordering follows the next frame that gets through, or the first step with no frame in
    its direction releases it: it never waits for traffic that does not come. :attr:`link` has
    the counts, printed when the bridge stops.

    ``idle_hz`` keeps simulated time running while the design is idle, so that its timers
    (a control request's time-out, a TCP retransmission, TIME-WAIT) run with no traffic: after
    each wait on the device the bridge simulates ``round(seconds_waited * idle_hz)`` cycles, at
    most ``step_cycles``. The default is the design's ``settings["idle_hz"]``, else
    :data:`DEFAULT_IDLE_HZ` for the back end; the first line it logs says the rate. ``0``: time
    stands still while nothing moves, and an idle bridge uses no CPU.
    """

    def __init__(self, sim, tap, *, port=None, step_cycles=20_000, log=print, stats_every=5.0,
                 impair=None, idle_hz=None):
        self.sim, self.tap, self.port = sim, tap, port
        self.step_cycles = step_cycles
        self.log = log
        self.stats_every = stats_every
        self.frames_in = self.frames_out = self.write_errors = 0
        if idle_hz is None:
            idle_hz = sim.design.settings.get("idle_hz", DEFAULT_IDLE_HZ.get(sim.backend, 0))
        if isinstance(idle_hz, bool) or not isinstance(idle_hz, (int, float)) \
                or not 0 <= idle_hz < float("inf"):
            raise SimError(f"idle_hz must be a number of cycles per second, 0 or more, "
                           f"not {idle_hz!r}")
        self.idle_hz = idle_hz
        if impair is not None and not isinstance(impair, Impairment):
            raise SimError(f"impair must be an apiary.sim.Impairment, not {impair!r}")
        self.impairment = impair or None
        #: The impaired link's two directions and their counts (None without an impairment).
        self.link = impair.link() if impair else None
        self._stop = False

    def stop(self, *_):
        self._stop = True

    def step(self):
        """One round: kernel → design, simulate, design → kernel. Returns the frames moved."""
        read = self.tap.read_frames()
        self.frames_in += len(read)
        frames = self._impaired("to_design", read)
        if frames:
            self.sim.send_many(frames, port=self.port)
        if frames or self.sim.pending(self.port) or not self.sim.idle:
            self.sim.run(self.step_cycles, until_idle=True)
        sent = self.sim.received(self.port, clear=True)
        for frame in self._impaired("from_design", sent):
            if self.tap.write_frame(frame.data):
                self.frames_out += 1
            else:
                self.write_errors += 1
        return len(read) + len(sent)

    def _impaired(self, direction, frames):
        """``frames`` through one direction of the link; with none, whatever it holds."""
        if self.link is None:
            return frames
        impaired = getattr(self.link, direction)
        return impaired.apply(frames) if frames else impaired.flush()

    def _wait(self, timeout):
        """Sleep on the device; then, with ``idle_hz``, simulate the time waited."""
        start = time.monotonic()
        self.tap.wait(timeout)
        if self.idle_hz:
            cycles = min(round((time.monotonic() - start) * self.idle_hz), self.step_cycles)
            if cycles:
                self.sim.run(cycles)

    def addresses(self):
        """The design's own addresses (``Design.settings`` ``mac`` and ``ipv4``), as text."""
        settings = self.sim.design.settings
        return ", ".join(f"{key} {settings[key]}" for key in ("mac", "ipv4") if key in settings)

    def summary(self):
        # Every counter that moved but the plain counts of what went through (``*_forwarded``,
        # ``*_frames``): per-reason drops (eth_rx_not_for_us...), the fabric's own, and what the
        # tiles did (tcp_tx_retransmits, ctl_reads...).
        moved = {k: v for k, v in self.sim.counters().items()
                 if v and not k.endswith(("_forwarded", "_frames"))}
        text = (f"frames in {self.frames_in}, frames out {self.frames_out}, "
                f"cycle {self.sim.cycle}")
        if self.write_errors:
            text += f", {self.write_errors} frames the kernel refused"
        if moved:
            text += ", counters: " + ", ".join(f"{k}={v}" for k, v in moved.items())
        return text

    def run(self, *, duration=None):
        """Bridge until SIGINT/SIGTERM (or for ``duration`` seconds). Returns normally."""
        old = {s: signal.signal(s, self.stop) for s in (signal.SIGINT, signal.SIGTERM)}
        start = last_stats = time.monotonic()
        rate = self.idle_hz
        rate_text = f"{round(rate):,}" if rate == round(rate) else f"{rate:,}"
        idle = (f"while idle, simulated time runs at up to {rate_text} cycles/s"
                if rate else "time stands still while it is idle (idle_hz 0)")
        self.log(f"bridging {self.sim.design.name!r} ({self.sim.backend}; {idle}) to TAP device "
                 f"{self.tap.name}; Ctrl-C stops")
        if self.impairment:
            self.log(f"impairing the link: {self.impairment}")
        addresses = self.addresses()
        if addresses:
            self.log(f"the design answers as {addresses}")
        try:
            while not self._stop:
                if not self.step():
                    self._wait(0.05)
                now = time.monotonic()
                if now - last_stats >= self.stats_every:
                    self.log(self.summary())
                    last_stats = now
                if duration is not None and now - start >= duration:
                    break
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)
        if self.link is not None:
            self.log("impaired: " + self.link.summary())
        self.log("stopped: " + self.summary())
