"""A lossy link, seeded and reproducible: frames lost, duplicated and reordered, per direction.

::

    imp = Impairment(loss=0.05, reorder=0.02, duplicate=0.01, seed=7)
    link = imp.link()                        # both directions, each with its own generator
    out = link.to_design.apply(frames)       # what reaches the design, in order
    out += link.to_design.flush()            # a frame still held back for reordering
    print(link.summary())                    # to design: 1000 frames, 50 lost, ...

Each direction draws from ``random.Random(f"{seed}:{name}")`` (``name`` is ``to_design`` or
``from_design``, prefixed with ``<port>:`` on a design with several ports), so the two
directions are independent and the same seed gives the same pattern on every run and machine.

Every frame offered draws exactly three numbers from its direction's generator, in this order,
whether or not they are used: *loss*, *duplicate*, *reorder*. A frame is lost if the first is below
``loss`` or its number (counting from 1 in its direction) is in that direction's drop list
(``drop_to_design``, ``drop_from_design``: the frames to lose for certain, as the QUIC network
simulator's drop scenario does, for a test that needs one particular segment lost); otherwise it is
emitted twice (the copies adjacent) if the second is below ``duplicate``; and it is held back if the
third is below ``reorder``, to be emitted (all its copies) right after the next frame that is
emitted in that direction: a swap with its successor. A frame that arrives while another is held is
never held itself, so at most one frame waits and about ``reorder / (1 + reorder)`` of the frames
not lost are swapped. :meth:`LinkDirection.flush` releases a held frame; the simulators and the TAP
bridge call it so that nothing waits forever.
"""

import random
from dataclasses import dataclass

from .core import SimError


__all__ = ["Impairment", "ImpairedLink", "LinkDirection", "DIRECTIONS", "probability"]

#: The two directions of a design's Ethernet link.
DIRECTIONS = ("to_design", "from_design")


def probability(value, what):
    """``value`` if it is a probability from 0 to 1 (inclusive); else one :class:`SimError`
    naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0.0 <= value <= 1.0:
        raise SimError(f"{what} must be a probability from 0 to 1, not {value!r}")
    return float(value)


@dataclass(frozen=True)
class Impairment:
    """What a lossy link does, as probabilities per frame (see :mod:`apiary.sim.impair`).

    ``directions`` names the directions the probabilities apply to (default both); frames in the
    other one pass untouched but are still counted. ``drop_to_design`` and ``drop_from_design``
    list frame numbers (1 for the first frame in that direction) lost whatever the draws say.
    An impairment whose probabilities are all 0 and whose drop lists are empty is false, so
    callers can skip it: ``if imp: ...``. The value holds no state; :meth:`link` and
    :meth:`direction` make fresh generators and counts each time.
    """
    loss: float = 0.0
    reorder: float = 0.0
    duplicate: float = 0.0
    seed: int = 1
    directions: tuple = DIRECTIONS
    drop_to_design: tuple = ()
    drop_from_design: tuple = ()

    def __post_init__(self):
        for name in ("loss", "reorder", "duplicate"):
            object.__setattr__(self, name, probability(getattr(self, name), name))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise SimError(f"the impairment's seed must be an integer, not {self.seed!r}")
        directions = (self.directions,) if isinstance(self.directions, str) else self.directions
        directions = tuple(directions)
        bad = [d for d in directions if d not in DIRECTIONS]
        if bad or not directions:
            raise SimError(f"impairment directions must be among {', '.join(DIRECTIONS)}, "
                           f"not {self.directions!r}")
        object.__setattr__(self, "directions", directions)
        for direction in DIRECTIONS:
            name = f"drop_{direction}"
            given = getattr(self, name)
            numbers = (given,) if isinstance(given, int) else given
            if not isinstance(numbers, (tuple, list, set, frozenset, range)) or not all(
                    isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in numbers):
                raise SimError(f"{name} lists frame numbers, each 1 or more, not {given!r}")
            object.__setattr__(self, name, tuple(sorted(set(numbers))))

    @classmethod
    def none(cls):
        """A link that does nothing (false)."""
        return cls()

    def __bool__(self):
        return bool(self.loss or self.reorder or self.duplicate or self.drop_to_design
                    or self.drop_from_design)

    def __str__(self):
        only = "" if self.directions == DIRECTIONS else \
            f", {' and '.join(d.replace('_', ' ') for d in self.directions)} only"
        drops = "".join(f"; losing frames {', '.join(map(str, numbers))} "
                        f"{direction.replace('_', ' ')}"
                        for direction in DIRECTIONS
                        if (numbers := getattr(self, f"drop_{direction}")))
        return (f"loss {self.loss:g}, reorder {self.reorder:g}, duplicate {self.duplicate:g}, "
                f"seed {self.seed}{only}{drops}")

    def direction(self, name, port=None):
        """A fresh :class:`LinkDirection` ``name`` (``to_design`` or ``from_design``); on a
        design with several ports, ``port`` names the port (it is part of the seed)."""
        if name not in DIRECTIONS:
            raise SimError(f"a link direction is one of {', '.join(DIRECTIONS)}, not {name!r}")
        return LinkDirection(self, name, port)

    def link(self, port=None):
        """A fresh :class:`ImpairedLink`: both directions of one port."""
        return ImpairedLink(self, port)


class LinkDirection:
    """One direction of an impaired link: frames in, the frames that get through out, in order.

    Frames are any objects (``bytes``, :class:`~apiary.sim.Frame`); a duplicate is the same
    object twice. Counts: ``frames`` offered, ``lost``, ``duplicated`` (frames emitted twice),
    ``reordered`` (frames emitted after their successor). Once :meth:`flush` has released any
    held frame, the frames emitted are ``frames - lost + duplicated``.
    """

    def __init__(self, impairment, name, port=None):
        self.name = name
        self.port = port
        impaired = name in impairment.directions
        self.loss = impairment.loss if impaired else 0.0
        self.duplicate = impairment.duplicate if impaired else 0.0
        self.reorder = impairment.reorder if impaired else 0.0
        self.drops = frozenset(getattr(impairment, f"drop_{name}"))
        key = name if port is None else f"{port}:{name}"
        self._rng = random.Random(f"{impairment.seed}:{key}")
        self._held = []
        self.frames = self.lost = self.duplicated = self.reordered = 0

    def apply(self, frames):
        """The frames that get through, in the order they arrive; a held frame stays held
        until the next frame is emitted or :meth:`flush` is called."""
        out = []
        draw = self._rng.random
        for frame in frames:
            self.frames += 1
            lose, twice, hold = draw() < self.loss, draw() < self.duplicate, draw() < self.reorder
            if lose or self.frames in self.drops:
                self.lost += 1
                continue
            copies = [frame, frame] if twice else [frame]
            self.duplicated += twice
            if self._held:
                out += copies + self._held
                self._held = []
                self.reordered += 1
            elif hold:
                self._held = copies
            else:
                out += copies
        return out

    def flush(self):
        """Release the held frame, if any (its copies, as a list; not counted as reordered)."""
        out, self._held = self._held, []
        return out

    @property
    def held(self):
        """Frames (copies) held back, waiting for a successor: 0, 1 or 2."""
        return len(self._held)

    def counts(self):
        """``{"frames": ..., "lost": ..., "reordered": ..., "duplicated": ...}``."""
        return {"frames": self.frames, "lost": self.lost, "reordered": self.reordered,
                "duplicated": self.duplicated}

    def summary(self):
        """``1000 frames, 50 lost, 10 reordered, 0 duplicated``."""
        return ", ".join(f"{v} {k}" for k, v in self.counts().items())


class ImpairedLink:
    """Both directions of one impaired port: ``to_design`` and ``from_design``, each a
    :class:`LinkDirection` with its own generator and counts."""

    def __init__(self, impairment, port=None):
        self.impairment = impairment
        self.to_design = impairment.direction("to_design", port)
        self.from_design = impairment.direction("from_design", port)

    def counts(self):
        """``{"to_design": {...}, "from_design": {...}}`` (see :meth:`LinkDirection.counts`)."""
        return {"to_design": self.to_design.counts(), "from_design": self.from_design.counts()}

    def summary(self):
        """One line: ``to design: 1000 frames, 50 lost, ...; from design: ...``."""
        return (f"to design: {self.to_design.summary()}; "
                f"from design: {self.from_design.summary()}")
