#!/usr/bin/env python3
"""A model of the K/V protocol of clustered Hopper kernels (src/cuda/sm90/cluster.cuh), run under
random interleavings.

Two CTAs walk the same tiles (same KV block counts). Each CTA's producer waits for its own empty
barrier, arms its own full barrier for the whole block, and issues its half of the block as a
multicast that lands later, at a random time, in the same stage of both CTAs (completing bytes on
both CTAs' full barriers). Consumer warps of each CTA wait for the full barrier, read the stage
(from the wgmma's issue until its wait), then arrive on their own CTA's empty barrier and on the
peer's (remote). After its last tile a producer waits until every stage is released (the
producer tail); then every actor of both CTAs meets at the cluster barrier and the CTAs exit.
The order of loads and releases is the overlapped consumers' (K_0, then K_j with V_{j-1}).

Checked in every run:
  * no deadlock,
  * every read sees both halves of the block it expects,
  * no multicast writes a stage that a consumer of the target CTA is still reading,
  * a multicast's bytes land in the phase they belong to (the target's full barrier has not
    completed that phase, nor is it a phase behind),
  * nothing reaches a CTA (a multicast, a remote arrival) after it exited.
Mutants (the same protocol with one piece removed) must fail within the runs: empty barriers that
count only their own CTA's consumers; no producer tail and no cluster barrier at the end.
Run: python3 dev/sm90/cluster_protocol_model.py [runs]   (no GPU needed)
"""

import random
import sys

from protocol_model import MBarrier, ModelError  # the same directory: sys.path[0] when run

STAGES = 2
WARPS = 3          # consumer warps per CTA (each stands for a warp's 32 lanes, arriving together)
BLOCK_BYTES = 100  # one K or V block; each CTA loads half


class Barrier(MBarrier):
    """protocol_model's mbarrier, but a peer's multicast bytes may land before this CTA's
    producer armed the phase: the transaction count may go negative in between."""

    def complete_tx(self, nbytes):
        self.tx -= nbytes
        self._maybe_complete()

    def passed(self, parity):
        return (self.completed & 1) != parity


class Ring:
    def __init__(self):
        self.stage, self.phase = 0, 0

    def advance(self):
        self.stage += 1
        if self.stage == STAGES:
            self.stage, self.phase = 0, self.phase ^ 1


class Cta:
    def __init__(self, rank, remote_arrivals):
        self.rank = rank
        empty_count = WARPS + (WARPS if remote_arrivals else 0)
        self.full = {(kind, s): Barrier(f"cta{rank}.{kind}_full[{s}]", 1)
                     for kind in "kv" for s in range(STAGES)}
        self.empty = {(kind, s): Barrier(f"cta{rank}.{kind}_empty[{s}]", empty_count)
                      for kind in "kv" for s in range(STAGES)}
        self.halves = {(kind, s): [None, None] for kind in "kv" for s in range(STAGES)}
        self.readers = {(kind, s): set() for kind in "kv" for s in range(STAGES)}
        self.exited = False


class Model:
    def __init__(self, rng, tiles, remote_arrivals=True, end_protection=True):
        self.rng, self.tiles = rng, tiles
        self.remote_arrivals, self.end_protection = remote_arrivals, end_protection
        self.ctas = [Cta(r, remote_arrivals) for r in range(2)]
        self.in_flight = []  # multicasts issued, not landed: (target, key, half, tag, use)
        self.at_cluster_barrier = 0
        self.actors = []
        for r in range(2):
            self.actors.append(self.producer(r))
            for w in range(WARPS):
                self.actors.append(self.consumer(r, w))
        self.total_actors = len(self.actors)

    def reach(self, cta, who):
        if cta.exited:
            raise ModelError(f"{who} reaches cta{cta.rank} after it exited")

    # -- producer ------------------------------------------------------------------------------
    def load(self, r, kind, ring, uses, tag):
        cta = self.ctas[r]
        key = (kind, ring.stage)
        empty = cta.empty[key]
        phase = ring.phase
        yield lambda: empty.passed(phase ^ 1)
        cta.full[key].arrive_expect_tx(BLOCK_BYTES)
        use = uses[key]
        uses[key] += 1
        for target in range(2):
            self.in_flight.append((target, key, r, tag, use))
        ring.advance()

    def producer(self, r):
        k_ring, v_ring = Ring(), Ring()
        uses = {(kind, s): 0 for kind in "kv" for s in range(STAGES)}
        for t, count in enumerate(self.tiles):
            if count > 0:
                yield from self.load(r, "k", k_ring, uses, (t, 0, "k"))
            for j in range(1, count):
                yield from self.load(r, "k", k_ring, uses, (t, j, "k"))
                yield from self.load(r, "v", v_ring, uses, (t, j - 1, "v"))
            if count > 0:
                yield from self.load(r, "v", v_ring, uses, (t, count - 1, "v"))
        if self.end_protection:  # sm90_cluster_producer_tail
            ring = k_ring
            for _ in range(STAGES):
                for kind in "kv":
                    barrier, phase = self.ctas[r].empty[(kind, ring.stage)], ring.phase
                    yield lambda barrier=barrier, phase=phase: barrier.passed(phase ^ 1)
                ring.advance()
        yield from self.finish(r)

    # -- consumers -----------------------------------------------------------------------------
    def acquire(self, r, w, kind, ring, tag):
        cta = self.ctas[r]
        key = (kind, ring.stage)
        full, phase = cta.full[key], ring.phase
        yield lambda: full.passed(phase)
        if cta.halves[key] != [tag, tag]:
            raise ModelError(f"cta{r} warp{w} reads {key} = {cta.halves[key]}, expects {tag}")
        cta.readers[key].add(w)
        return key

    def release(self, r, w, key):
        cta = self.ctas[r]
        cta.readers[key].discard(w)
        cta.empty[key].arrive()
        if self.remote_arrivals:
            peer = self.ctas[r ^ 1]
            self.reach(peer, f"cta{r} warp{w}'s remote arrival")
            peer.empty[key].arrive()

    def consumer(self, r, w):
        k_ring, v_ring = Ring(), Ring()
        for t, count in enumerate(self.tiles):
            if count == 0:
                continue
            k = yield from self.acquire(r, w, "k", k_ring, (t, 0, "k"))
            k_ring.advance()
            yield None  # S = Q K^T running
            self.release(r, w, k)
            for j in range(1, count):
                k = yield from self.acquire(r, w, "k", k_ring, (t, j, "k"))
                k_ring.advance()
                v = yield from self.acquire(r, w, "v", v_ring, (t, j - 1, "v"))
                v_ring.advance()
                yield None  # both GEMMs running
                self.release(r, w, k)
                yield None  # P V still running
                self.release(r, w, v)
            v = yield from self.acquire(r, w, "v", v_ring, (t, count - 1, "v"))
            v_ring.advance()
            yield None
            self.release(r, w, v)
        yield from self.finish(r)

    # -- the end -------------------------------------------------------------------------------
    def finish(self, r):
        if self.end_protection:
            self.at_cluster_barrier += 1
            yield lambda: self.at_cluster_barrier == self.total_actors
        self.exit(r)

    def exit(self, r):
        cta = self.ctas[r]
        cta.done_actors = getattr(cta, "done_actors", 0) + 1
        if cta.done_actors == 1 + WARPS:
            cta.exited = True

    # -- the multicast landing -----------------------------------------------------------------
    def land(self, index):
        target, key, half, tag, use = self.in_flight.pop(index)
        cta = self.ctas[target]
        self.reach(cta, f"cta{half}'s multicast of {tag}")
        if cta.readers[key]:
            raise ModelError(f"cta{half}'s multicast of {tag} overwrites cta{target} {key} "
                             f"while warps {sorted(cta.readers[key])} read it")
        full = cta.full[key]
        if full.completed != use:
            raise ModelError(f"cta{half}'s multicast of {tag} lands in cta{target} {key} in "
                             f"phase {full.completed}, belongs to phase {use}")
        cta.halves[key][half] = tag
        full.complete_tx(BLOCK_BYTES // 2)

    def run(self):
        waiting = {i: None for i in range(len(self.actors))}  # actor -> predicate it waits on
        live = set(waiting)
        while live or self.in_flight:
            ready = [i for i in live if waiting[i] is None or waiting[i]()]
            choices = [("actor", i) for i in ready] + [("land", i)
                                                       for i in range(len(self.in_flight))]
            if not choices:
                raise ModelError("deadlock: " + ", ".join(
                    f"actor {i}" for i in sorted(live)) + " wait")
            what, i = self.rng.choice(choices)
            if what == "land":
                self.land(i)
                continue
            try:
                waiting[i] = next(self.actors[i])
            except StopIteration:
                live.discard(i)
        for cta in self.ctas:
            if not cta.exited:
                raise ModelError(f"cta{cta.rank} never exited")


def random_tiles(rng):
    return [rng.choice([0, 1, 1, 2, 3, 5]) for _ in range(rng.randint(1, 4))]


def run_many(runs, seed, **mutation):
    rng = random.Random(seed)
    for run in range(runs):
        tiles = random_tiles(rng)
        try:
            Model(random.Random(rng.random()), tiles, **mutation).run()
        except ModelError as error:
            return f"run {run}, tiles {tiles}: {error}"
    return None


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    failure = run_many(runs, 1)
    if failure:
        print(f"FAIL (the protocol): {failure}")
        return 1
    print(f"the clustered K/V protocol: {runs} runs, no failure")
    status = 0
    mutants = {
        "empty barriers count only their own CTA's consumers": {"remote_arrivals": False},
        "no producer tail, no cluster barrier at the end": {"end_protection": False},
    }
    for name, mutation in mutants.items():
        failure = run_many(runs, 2, **mutation)
        if failure is None:
            print(f"FAIL: mutant '{name}' survived {runs} runs (the model would miss it)")
            status = 1
        else:
            print(f"mutant '{name}' caught: {failure}")
    return status


if __name__ == "__main__":
    sys.exit(main())
