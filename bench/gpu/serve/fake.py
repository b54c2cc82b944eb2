"""A stand-in for the model (no torch): fixed times per prefill and decode step, tokens known in advance.

Its time passes on whatever clock it is given: the tests' FakeClock (jumps,
deterministic) or the host's (sleeps: server.py --fake, to run the driver
end to end on a CPU). Token k of the request with prompt seed s is
token(s, k), so a scheduling mistake (a token to the wrong request, a slot
mixed up) shows as a wrong sequence.
"""
import time


def token(seed, k):
    return (seed * 1000003 + k * 7919) % 50021


class FakeModel:
    def __init__(self, clock, prefill_s=0.004, decode_s=0.002, decode_slot_s=0.0, hold_s=0.0):
        self.clock = clock
        self.prefill_s, self.decode_s, self.decode_slot_s = prefill_s, decode_s, decode_slot_s
        self.hold_s = hold_s  # each step's launches held this long first, as a library's pacer would
        self.state = {}  # slot -> [prompt seed, tokens made]
        self.prefills = 0
        self.decodes = 0
        self.batch_sizes = []
        self.busy_s = 0.0  # as the model's: the device time of its own steps
        self.steps = []  # as the model's: (kind, device span, host wall, issue, start) per call

    def _spend(self, d, kind):
        # as the model's events: the span starts before the held launches
        t = self.clock.now()
        self.clock.sleep_until(t + self.hold_s)
        issued = self.clock.now() - t
        self.clock.sleep_until(t + self.hold_s + d)
        span = self.clock.now() - t
        self.busy_s += span
        self.steps.append((kind, span, self.clock.now() - t, issued, t))

    def prefill(self, slot, prompt_seed):
        self._spend(self.prefill_s, "prefill")
        self.state[slot] = [prompt_seed, 1]
        self.prefills += 1
        return token(prompt_seed, 0)

    def decode(self, slots):
        self._spend(self.decode_s + self.decode_slot_s * len(slots), "decode")
        out = {}
        for s in slots:
            seed, k = self.state[s]
            out[s] = token(seed, k)
            self.state[s][1] = k + 1
        self.decodes += 1
        self.batch_sizes.append(len(slots))
        return out


class FakeClock:
    """Time that moves only when something spends it."""

    def __init__(self, t=1000.0):
        self.t = t

    def now(self):
        return self.t

    def sleep_until(self, t):
        if t > self.t:
            self.t = t


class HostClock:
    def now(self):
        return time.perf_counter()

    def sleep_until(self, t):
        d = t - time.perf_counter()
        if d > 0:
            time.sleep(d)
