"""Scheduling and load generation of the serving benchmark, without torch.

The engine drives any model with two calls:
  prefill(slot, prompt_seed) -> first token (the prompt is made from the seed)
  decode(slots) -> {slot: token}, one step for every active slot at once
and reads time from a clock with now() and sleep_until(t). server.py plugs in
the real model and clock; the tests plug in a fake model that advances a fake
clock, so the policy below is checked deterministically on a CPU.

Batching policy (continuous batching, as vLLM and SGLang do): a fixed number
of slots (the captured decode batch). Each engine step first admits waiting
requests in arrival order (FIFO) into free slots, at most `prefills_per_step`
of them, each with its own prefill (batch 1, which yields its first token),
then runs one decode step for every occupied slot. A request leaves its slot
as soon as it has its `new_tokens` tokens; the slot is free for the next
step's admission. Empty slots ride along in the decode step (its shape is
fixed by the CUDA graph), their outputs ignored.
"""
import collections
import math
import random
import stats


class Request:
    __slots__ = ("id", "arrival", "prompt_seed", "new_tokens", "tokens", "times", "slot", "admitted")

    def __init__(self, rid, arrival, prompt_seed, new_tokens):
        self.id = rid
        self.arrival = arrival
        self.prompt_seed = prompt_seed
        self.new_tokens = new_tokens
        self.tokens = []
        self.times = []  # clock time each token was known on the host
        self.slot = None
        self.admitted = None

    @property
    def done(self):
        return len(self.tokens) >= self.new_tokens

    @property
    def ttft(self):
        return self.times[0] - self.arrival

    @property
    def itls(self):
        return [b - a for a, b in zip(self.times, self.times[1:])]


class Engine:
    def __init__(self, model, clock, slots, new_tokens, prefills_per_step=1):
        if slots < 1 or new_tokens < 1 or prefills_per_step < 1:
            raise ValueError("slots, new_tokens and prefills_per_step must be >= 1, got %d, %d, %d"
                             % (slots, new_tokens, prefills_per_step))
        self.model = model
        self.clock = clock
        self.new_tokens = new_tokens
        self.prefills_per_step = prefills_per_step
        self.slots = [None] * slots
        self.waiting = collections.deque()
        self.next_id = 0
        self.steps = 0

    def submit(self, arrival, prompt_seed):
        r = Request(self.next_id, arrival, prompt_seed, self.new_tokens)
        self.next_id += 1
        self.waiting.append(r)
        return r

    @property
    def active(self):
        return sum(1 for r in self.slots if r is not None)

    @property
    def idle(self):
        return not self.waiting and self.active == 0

    def _emit(self, r, token, t, finished):
        r.tokens.append(token)
        r.times.append(t)
        if r.done:
            self.slots[r.slot] = None
            finished.append(r)

    def step(self):
        """One iteration: admissions (prefills), then one decode step. Returns the requests finished in it."""
        finished = []
        admitted = 0
        while self.waiting and admitted < self.prefills_per_step and None in self.slots:
            slot = self.slots.index(None)
            r = self.waiting.popleft()
            r.slot = slot
            r.admitted = self.clock.now()
            self.slots[slot] = r
            tok = self.model.prefill(slot, r.prompt_seed)
            self._emit(r, tok, self.clock.now(), finished)
            admitted += 1
        live = [i for i, r in enumerate(self.slots) if r is not None]
        if live:
            out = self.model.decode(live)
            t = self.clock.now()
            for i in live:
                self._emit(self.slots[i], out[i], t, finished)
        self.steps += 1
        return finished


def poisson_arrivals(rate, seed, start=0.0):
    """Endless arrival times of a Poisson process of `rate` per second from `start` (seeded: the same every run)."""
    if not rate > 0:
        raise ValueError("arrival rate must be > 0 requests/s, got %r" % (rate,))
    rng = random.Random(seed)
    t = start
    while True:
        t += rng.expovariate(rate)
        yield t


def closed_loop(engine, clients, duration, warmup, seed=0):
    """Saturation: `clients` requests outstanding at all times, each replaced the moment it finishes.

    Runs for `duration` seconds of engine clock; counts the tokens produced in
    [start + warmup, start + duration]. Returns a dict: tokens, window_s,
    tok_per_s, completed (requests finished in the window), req_per_s (tokens
    per second / new_tokens: what the open loop's rate is derived from), steps."""
    if not 0 <= warmup < duration:
        raise ValueError("closed loop: need 0 <= warmup < duration, got %r, %r" % (warmup, duration))
    clock = engine.clock
    t0 = clock.now()
    w0, w1 = t0 + warmup, t0 + duration
    seeds = random.Random(seed)
    live = [engine.submit(t0, seeds.randrange(1 << 30)) for _ in range(clients)]
    done = []
    steps0 = engine.steps
    while clock.now() < w1:
        for r in engine.step():
            done.append(r)
            live.remove(r)
            live.append(engine.submit(clock.now(), seeds.randrange(1 << 30)))
    tokens = sum(1 for r in done + live for t in r.times if w0 <= t <= w1)
    completed = sum(1 for r in done if w0 <= r.times[-1] <= w1)
    window = w1 - w0
    return {
        "tokens": tokens,
        "window_s": window,
        "tok_per_s": tokens / window,
        "req_per_s": tokens / window / engine.new_tokens,
        "completed": completed,
        "steps": engine.steps - steps0,
        "clients": clients,
    }


def drain(engine):
    """Finish whatever is in the engine (between phases, so that one phase's load does not leak into the next)."""
    while not engine.idle:
        engine.step()


def open_loop(engine, rate, measured, seed, max_s, keep_going=lambda: False, done_cb=lambda: None):
    """Requests at Poisson times of `rate`/s; the first `measured` of them are the sample.

    Arrivals go on after the sample has arrived (so that the sample's tail
    sees the same load as its head), until the sample has finished and
    keep_going() is false (a peer server still measuring keeps this one
    loaded). done_cb() is called once, when the sample has finished. Gives up
    after max_s seconds of engine clock: the result then says so
    (complete: false) and holds what finished. TTFT counts from the request's
    arrival time, so queueing before admission is in it. Load beyond the
    sample is left unfinished at the end. With a model that counts its
    device time (busy_s), the result has busy_s and busy_share over the
    loop."""
    clock = engine.clock
    t0 = clock.now()
    busy0 = getattr(engine.model, "busy_s", None)
    steps0 = len(getattr(engine.model, "steps", ()))
    arrivals = poisson_arrivals(rate, seed, start=t0)
    seeds = random.Random(seed + 1)
    nxt = next(arrivals)
    sample = []
    sample_ids = set()
    finished_sample = 0
    signalled = False
    while True:
        now = clock.now()
        if now - t0 > max_s:
            break
        while nxt <= now:
            r = engine.submit(nxt, seeds.randrange(1 << 30))
            if len(sample) < measured:
                sample.append(r)
                sample_ids.add(r.id)
            nxt = next(arrivals)
        if finished_sample >= measured:
            if not signalled:
                done_cb()
                signalled = True
            if not keep_going():
                break
        if engine.idle:
            clock.sleep_until(nxt)
            continue
        for r in engine.step():
            if r.id in sample_ids:
                finished_sample += 1
    end = clock.now()
    # What is still queued or running is load, not sample: left unfinished.
    done = [r for r in sample if r.done]
    out = {
        "rate": rate,
        "measured": measured,
        "requests": done,
        "complete": len(done) == measured,
        "duration_s": end - t0,
    }
    if busy0 is not None and end > t0:
        # the share of the loop's time the model's own work held the device:
        # for the dedicated server, the busy share that sets what a batch
        # server beside it is owed (1 - share)
        out["busy_s"] = engine.model.busy_s - busy0
        out["busy_share"] = out["busy_s"] / (end - t0)
    steps = getattr(engine.model, "steps", [])[steps0:]
    out.update(step_summary(steps))
    out.update(idle_summary(steps, t0, end))
    return out


def step_summary(steps):
    """Per kind of step (prefill, decode) of a model's (kind, device span, host wall, issue) records: how many,
    the p50 and p99 of the span, of the wait (wall - span: what the step waited for besides its span) and of
    the issue (the host's time to issue the step's launches, where a library's hold shows)."""
    out = {}
    for kind in sorted({st[0] for st in steps}):
        mine = [st for st in steps if st[0] == kind]
        out[kind + "_n"] = len(mine)
        for name, vals in (("span", [st[1] for st in mine]), ("wait", [max(0.0, st[2] - st[1]) for st in mine]),
                           ("issue", [st[3] for st in mine])):
            out.update({"%s_%s_p50" % (kind, name): stats.percentile(vals, 50),
                        "%s_%s_p99" % (kind, name): stats.percentile(vals, 99)})
    return out


# The order's yield hold (internal/arbiter OrderYieldHold; test_serve.py checks the two agree): a lower
# tenant starts new work only once every higher one has been idle this long.
ORDER_YIELD_HOLD_S = 0.002


def idle_summary(steps, t0, end, hold=ORDER_YIELD_HOLD_S):
    """The device's idle gaps in a model's loop from t0 to end: before its first step, between one step's
    span and the next's (a step's first event is recorded before its launches, so on an idle device its span
    starts at its host start), after its last. Their p50, p99 and max, and the share of the loop past the
    hold in each gap: the time a lower tenant yielding to this model could start work in."""
    spans = sorted((st[4], st[4] + st[1]) for st in steps if len(st) > 4)
    if not spans or end <= t0:
        return {}
    gaps, last = [], t0
    for start, stop in spans:
        gaps.append(max(0.0, start - last))
        last = max(last, stop)
    gaps.append(max(0.0, end - last))
    return {"idle_gap_p50": stats.percentile(gaps, 50), "idle_gap_p99": stats.percentile(gaps, 99),
            "idle_gap_max": max(gaps), "idle_past_hold_share": sum(max(0.0, g - hold) for g in gaps) / (end - t0)}
