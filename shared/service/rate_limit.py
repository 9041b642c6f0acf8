"""Per-client token buckets for the HTTP APIs (the query API, the trainer).

Why token buckets: a dashboard that refreshes twenty panels at once needs a burst, a script in a
tight loop needs a ceiling; a bucket of ``burst`` requests refilled at ``rate`` per second gives
both. A client is a token's name when the request is authenticated, else the client's IP address.

Why in-process: each replica limits on its own (N replicas behind a balancer allow N x the rate),
which needs no shared store and cannot fail open when one is down. The table of buckets is bounded
(``max_clients``, least recently seen dropped first), so many client addresses cannot grow memory;
a client whose bucket was dropped starts again with a full one.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable


class TokenBuckets:
    """``take(client)`` spends one request of ``client``'s bucket, or says how long to wait."""

    def __init__(
        self, rate: float, burst: int, max_clients: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0 or burst < 1 or max_clients < 1:
            raise ValueError(f"rate {rate} must be > 0, burst {burst} and max_clients {max_clients} >= 1")
        self.rate = rate
        self.burst = burst
        self.max_clients = max_clients
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # client -> (tokens, at)

    def take(self, client: str) -> float:
        """0.0 when the request may go ahead (one token spent), else the seconds until it may."""
        now = self._clock()
        tokens, at = self._buckets.pop(client, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        wait = 0.0
        if tokens >= 1.0:
            tokens -= 1.0
        else:
            wait = (1.0 - tokens) / self.rate
        self._buckets[client] = (tokens, now)  # most recently seen last
        while len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)
        return wait

    def __len__(self) -> int:
        return len(self._buckets)
