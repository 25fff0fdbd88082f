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


__all__ = ["TapDevice", "TapBridge"]

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
        frames = []
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


class TapBridge:
    """Move frames between a :class:`~apiary.sim.Sim` and a :class:`TapDevice` until stopped.

    Each step takes every frame the kernel has sent, simulates ``step_cycles`` cycles (or until
    the design is idle), and writes back what the design sent. When nothing happens it sleeps on
    the device, so an idle bridge uses no CPU. ``log`` receives one line per event worth telling.
    """

    def __init__(self, sim, tap, *, port=None, step_cycles=20_000, log=print, stats_every=5.0):
        self.sim, self.tap, self.port = sim, tap, port
        self.step_cycles = step_cycles
        self.log = log
        self.stats_every = stats_every
        self.frames_in = self.frames_out = self.write_errors = 0
        self._stop = False

    def stop(self, *_):
        self._stop = True

    def step(self):
        """One round: kernel → design, simulate, design → kernel. Returns the frames moved."""
        frames = self.tap.read_frames()
        if frames:
            self.sim.send_many(frames, port=self.port)
            self.frames_in += len(frames)
        moved = len(frames)
        if frames or self.sim.pending(self.port) or not self.sim.idle:
            self.sim.run(self.step_cycles, until_idle=True)
        for frame in self.sim.received(self.port, clear=True):
            if self.tap.write_frame(frame.data):
                self.frames_out += 1
            else:
                self.write_errors += 1
            moved += 1
        return moved

    def addresses(self):
        """The design's own addresses (``Design.settings`` ``mac`` and ``ipv4``), as text."""
        settings = self.sim.design.settings
        return ", ".join(f"{key} {settings[key]}" for key in ("mac", "ipv4") if key in settings)

    def summary(self):
        # Every counter that is not a count of what went through: per-reason drop counters
        # (eth_rx_not_for_us, udp_rx_bad_checksum...) and the fabric's own.
        drops = {k: v for k, v in self.sim.counters().items()
                 if v and not k.endswith(("_forwarded", "_frames"))}
        text = (f"frames in {self.frames_in}, frames out {self.frames_out}, "
                f"cycle {self.sim.cycle}")
        if self.write_errors:
            text += f", {self.write_errors} frames the kernel refused"
        if drops:
            text += ", dropped: " + ", ".join(f"{k}={v}" for k, v in drops.items())
        return text

    def run(self, *, duration=None):
        """Bridge until SIGINT/SIGTERM (or for ``duration`` seconds). Returns normally."""
        old = {s: signal.signal(s, self.stop) for s in (signal.SIGINT, signal.SIGTERM)}
        start = last_stats = time.monotonic()
        self.log(f"bridging {self.sim.design.name!r} ({self.sim.backend}) to TAP device "
                 f"{self.tap.name}; Ctrl-C stops")
        addresses = self.addresses()
        if addresses:
            self.log(f"the design answers as {addresses}")
        try:
            while not self._stop:
                if not self.step():
                    self.tap.wait(0.05)
                now = time.monotonic()
                if now - last_stats >= self.stats_every:
                    self.log(self.summary())
                    last_stats = now
                if duration is not None and now - start >= duration:
                    break
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)
        self.log("stopped: " + self.summary())
