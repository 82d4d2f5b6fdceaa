#!/usr/bin/env python3
"""A model of the Hopper kernel's synchronization protocol, run under random interleavings.

It mirrors src/cuda/sm90/{producer,consumer,consumer_overlap,epilogue,kernel}.cuh step by step:
mbarriers (arrival counts, transaction bytes, phase parity), TMA loads completing later, the
ping-pong turns' named barriers (256 threads, one per consumer), wgmma reads of shared memory
from issue until the wait returns (a release placed before the wait is caught), and the TMA
store reading the buffer O is staged in (the Q slab, its own buffer, or a V stage, stored by the
consumer or by the producer: "vring_producer", Sm90Switch::kProducerStoresO). It checks, for the
plain, overlap and persistent schedules:
  * no deadlock (some role can always move until all finish),
  * every read sees the tile and KV step it expects (stage ring and Q phases in step),
  * the producer never overwrites a buffer that a wgmma or a store is still reading,
  * every named-barrier generation pairs the owner's sync with the previous consumer's arrival.
Two consumer warpgroups, or three (consumers=3: the rows of 192-row tiles, O in the Q slab or a
buffer of its own).
Tiles may start with a slab before row 0 (a causal first block, sm90_block_row_begin): consumer
0's Q is then neither loaded nor stored, and it computes on whatever its slab holds.
FP8 (transpose=True, v_transpose.cuh): a transposer role copies each V stage into a V^T stage
(vt_full / v_raw_empty), the consumers read V^T, and the producer stops the transposer after its
last V with the stop word; O staged in its own buffer, in a raw V stage or stored from registers
("regs"); with ping-pong turns and without (ping_pong=False, the fp8 rows'
Sm90Switch::kNoPingPong). Two FP8 mutants must fail: a stop that waits for the next stage only,
a transposer that does not wait for v_empty before overwriting V^T.
Dead blocks (dead_blocks=True, the overlap schedules; Sm90Switch::kSkipDeadBlocks under a causal
mask): a tile's first KV blocks (the last keys) may lie past the diagonal of a consumer's rows;
the consumer takes their turns without reads and waits for each block after its turn
(sm90_pass_dead_blocks). A later consumer's rows see more keys, so it passes no more blocks than
an earlier one's; each consumer sees one key at least (a consumer that sees none keeps the
protocol without reads, as one without rows does in the kernel).
Leader waits (leader_waits=True, the overlap schedules; Sm90Switch::kLeaderWaitsKv, which the
dense layout's unpacked tiles take): in the steps after a tile's first S, the leader alone waits,
for the step's K before its turn and for V (or V^T) in its turn after the S issue, as FA3's
ping-pong step does; the turns start at the leader, so the other consumers' turns for the step come
after the leader's, which passed both waits (runs 305-311 in docs/kernels.md). The leader is
consumer 0, or with dead blocks the last consumer (kSm90FirstTurn in consumer_overlap.cuh), which
passes the fewest. Without turns the order is gone, and so it is where consumer 0 leads and passes
blocks that the others compute on: those mutants must fail.
Run: python3 dev/sm90/protocol_model.py [runs]   (no GPU needed)
"""

import random
import sys


class ModelError(Exception):
    pass


ANY = object()  # a read that may see whatever the buffer holds (a slab no tile row uses)
# A consumer warpgroup's threads: what each of its barrier arrivals counts.
WARPGROUP_THREADS = 128


class MBarrier:
    def __init__(self, name, count):
        self.name, self.count = name, count
        self.pending, self.tx, self.completed = count, 0, 0

    def _maybe_complete(self):
        if self.pending == 0 and self.tx == 0:
            self.completed += 1
            self.pending = self.count

    def arrive(self, weight=1):
        if self.pending < weight:
            raise ModelError(f"{self.name}: {weight} arrivals but only {self.pending} pending")
        self.pending -= weight
        self._maybe_complete()

    def arrive_expect_tx(self, nbytes):
        self.tx += nbytes
        self.arrive()

    def complete_tx(self, nbytes):
        self.tx -= nbytes
        if self.tx < 0:
            raise ModelError(f"{self.name}: more bytes completed than expected")
        self._maybe_complete()

    def passed(self, parity):
        # try_wait.parity(p) succeeds once the phase with parity p has completed, i.e. when the
        # phase in progress (index `completed`) has the other parity.
        return (self.completed & 1) != parity


class NamedBarrier:
    THRESHOLD = 2 * WARPGROUP_THREADS  # the owner's sync and the previous consumer's arrival

    def __init__(self, name, owner):
        self.name, self.owner = name, owner
        self.arrived, self.generation, self.syncers = 0, 0, []

    def _add(self, who, weight, is_sync):
        self.arrived += weight
        if is_sync:
            self.syncers.append(who)
        if self.arrived == self.THRESHOLD:
            if self.syncers != [self.owner]:
                raise ModelError(f"{self.name}: generation completed with syncers {self.syncers}")
            self.arrived, self.syncers = 0, []
            self.generation += 1
        elif self.arrived > self.THRESHOLD:
            raise ModelError(f"{self.name}: over-arrival")

    def arrive(self, who):
        self._add(who, WARPGROUP_THREADS, False)

    def sync(self, who):
        generation = self.generation
        self._add(who, WARPGROUP_THREADS, True)
        return generation


class Smem:
    """Buffers with their content and the set of readers still using them."""

    def __init__(self, stages, consumers):
        self.content, self.readers = {}, {}
        names = [f"{b}{c}" for b in ("q", "o") for c in range(consumers)]
        names += [f"k{s}" for s in range(stages)]
        names += [f"vt{s}" for s in range(stages)]
        for name in names + [f"v{s}" for s in range(stages)]:
            self.content[name] = None
            self.readers[name] = set()

    def write(self, name, value, who):
        if self.readers[name]:
            raise ModelError(f"{who} overwrites {name} while {self.readers[name]} read it")
        self.content[name] = value

    def start_read(self, name, expected, who):
        if expected is not ANY and self.content[name] != expected:
            raise ModelError(f"{who} reads {name} = {self.content[name]}, expected {expected}")
        self.readers[name].add(who)

    def end_read(self, name, who):
        self.readers[name].discard(who)


class Ring:
    def __init__(self, stages):
        self.stages, self.stage, self.phase = stages, 0, 0

    def advance(self):
        self.stage += 1
        if self.stage == self.stages:
            self.stage, self.phase = 0, self.phase ^ 1

    def copy(self):
        r = Ring(self.stages)
        r.stage, r.phase = self.stage, self.phase
        return r


KV_BYTES, Q_SLAB_BYTES = 100, 25
TRANSPOSER_THREADS = 96


class Cta:
    def __init__(self, tiles, stages, schedule, rng, staging="qslab", transpose=False,
                 mutant=None, ping_pong=True, leader_waits=False, consumers=2, leader=0):
        self.tiles, self.stages, self.schedule, self.rng = tiles, stages, schedule, rng
        # Consumer warpgroups (the tuning row's `consumers`): 2, or 3 in the d64
        # and d128 rows of 192-row tiles.
        self.consumers = consumers
        self.transpose = transpose  # FP8: V^T written by the transposer (v_transpose.cuh)
        # False: the consumers take no turns (Sm90Switch::kNoPingPong, the fp8 rows).
        self.ping_pong = ping_pong
        # True: in a tile's steps after its first S only the leader waits for K and V.
        self.leader_waits = leader_waits
        # The consumer of each KV step's first turn (the kernel's kSm90FirstTurn).
        self.leader = leader
        # FP8 mutants that must fail: "stop_one_stage" (the stop waits for the next stage only),
        # "no_vt_release_wait" (the transposer overwrites V^T without waiting for v_empty); and
        # "store_no_read_wait" (the producer loads V where it stores O without waiting for the
        # store's read).
        self.mutant = mutant
        self.vt_full = [MBarrier(f"vt_full{s}", TRANSPOSER_THREADS) for s in range(stages)]
        self.v_raw_empty = [MBarrier(f"v_raw_empty{s}", TRANSPOSER_THREADS)
                            for s in range(stages)]
        self.stop = False  # the transposer's stop word
        self.persistent = schedule in ("persistent", "pplain")
        # Where O is staged (persistent schedules; one tile per CTA always uses the Q slab):
        # "qslab", Q handed back after the store read it; "own" (kSeparateOStaging) or "vring"
        # (kOStagingInVRing), Q handed back after the last S wgmma.
        # "vring_producer" (Sm90Switch::kProducerStoresO): a V stage, which the producer stores
        # from: the consumer stages O, writes the store slot and arrives on o_free alone.
        self.producer_stores = self.persistent and staging == "vring_producer"
        staging = "vring" if staging == "vring_producer" else staging
        self.staging = staging if self.persistent else "qslab"
        self.early = self.staging != "qslab"
        # vring: consumer c's O store has read V stage (next + c); the producer waits before
        # loading that tile's V_c there.
        # FP8 d256 takes Sm90Switch::kLoneStoreWait: only its storing thread waits for the read.
        self.lone_store_wait = transpose
        o_free_arrivals = 1 if self.producer_stores else WARPGROUP_THREADS
        self.o_free = [MBarrier(f"o_free{c}", o_free_arrivals) for c in range(consumers)]
        # producer_stores: each consumer's store slot, (tile, whether it stores) of the O it
        # staged last; None before the first (the kernel zeroes the slots).
        self.o_slot = [None] * consumers
        self.smem = Smem(stages, consumers)
        self.q_full = MBarrier("q_full", 1)
        # Every consumer thread arrives on the K / V empty barriers (and on q_empty when Q goes
        # back after the last S); one thread a consumer otherwise.
        threads = WARPGROUP_THREADS * consumers
        self.q_empty = MBarrier("q_empty", threads if self.early else consumers)
        self.k_full = [MBarrier(f"k_full{s}", 1) for s in range(stages)]
        self.v_full = [MBarrier(f"v_full{s}", 1) for s in range(stages)]
        self.k_empty = [MBarrier(f"k_empty{s}", threads) for s in range(stages)]
        self.v_empty = [MBarrier(f"v_empty{s}", threads) for s in range(stages)]
        # One per consumer: its owner's sync and the previous consumer's arrival.
        self.turn = [NamedBarrier(f"turn{c}", f"c{c}") for c in range(consumers)]
        self.async_events = []  # pending TMA completions: callables
        self.slot = None  # persistent schedules: the tile slot in shared memory
        # What each consumer's Q reads of the current tile expect.
        self.q_expect = [None] * consumers

    # --- producer (producer.cuh) ---
    def load(self, kind, tile_id, step, ring):
        s = ring.stage
        v_empty = self.v_raw_empty[s] if self.transpose else self.v_empty[s]
        empty = self.k_empty[s] if kind == "k" else v_empty
        full = self.k_full[s] if kind == "k" else self.v_full[s]
        yield lambda: empty.passed(ring.phase ^ 1)
        full.arrive_expect_tx(KV_BYTES)
        buf = f"{kind}{s}"

        def land(buf=buf, full=full, value=(tile_id, step)):
            self.smem.write(buf, value, "producer TMA")
            full.complete_tx(KV_BYTES)

        self.async_events.append(land)
        ring.advance()

    def load_v(self, tile_id, step, ring, q_phase, staged):
        # vring: V_c of a tile goes where consumer c staged the previous tile's O.
        if self.staging == "vring" and step < self.consumers:
            yield from self.free_o_stage(step, q_phase, staged)
        yield from self.load("v", tile_id, step, ring)

    def free_o_stage(self, c, q_phase, staged):
        """Consumer c's O of the previous tile has left its V stage: waited for, or where the
        producer stores it (sm90_produce's free_o_stage), stored with the later consumers' whose
        o_free a probe finds complete, then one wait for the reads. `staged`: (the previous
        tile's id or None, the ring position after it, the consumers stored this tile)."""
        if not self.producer_stores:
            yield lambda qp=q_phase, c=c: self.o_free[c].passed(qp ^ 1)
            return
        reads = []
        previous, after, stored = staged
        if c not in stored:
            yield lambda qp=q_phase, c=c: self.o_free[c].passed(qp ^ 1)
            reads += self.issue_o_store(c, previous, after)
        for later in range(c + 1, self.consumers):
            if later not in stored and self.o_free[later].passed(q_phase ^ 1):
                reads += self.issue_o_store(later, previous, after)
                stored.add(later)
        yield from self.wait_store_reads(reads)

    def issue_o_store(self, c, previous, after):
        # The store of consumer c's staged O, as its slot says: the V stage c places past the
        # previous tile, which must still hold that O. Returns the buffers it reads.
        slot = self.o_slot[c]
        if (slot[0] if slot else None) != previous:
            raise ModelError(f"producer reads o_slot{c} = {slot}, expected tile {previous}")
        if slot is None or not slot[1]:
            return []
        pos = after.copy()
        for _ in range(c):
            pos.advance()
        v = f"v{pos.stage}"
        self.smem.start_read(v, ("O", previous, c), "producer store")
        return [v]

    def wait_store_reads(self, reads):
        def end(reads=reads):
            for v in reads:
                self.smem.end_read(v, "producer store")
        if self.mutant == "store_no_read_wait":
            self.async_events.append(end)
            return
        yield lambda: True  # the stores read until the wait returns
        end()

    def producer(self):
        ring, q_phase, previous = Ring(self.stages), 0, None
        for tile_id, count, skip_q0, _ in self.tiles:
            k_ring, v_ring = ring.copy(), ring.copy()
            staged = (previous, ring.copy(), set())
            if count > 0:
                yield from self.load("k", tile_id, 0, k_ring)
            if self.persistent:
                yield lambda qp=q_phase: self.q_empty.passed(qp ^ 1)
                self.slot = tile_id  # the claimed tile index, published by the q_full arrival
            if self.staging == "vring":
                # Fewer V loads than consumers: the stages of the previous O stores no V load
                # will wait for are waited for here, before the consumers may start the tile.
                for c in range(count, self.consumers):
                    yield from self.free_o_stage(c, q_phase, staged)
            slabs = [f"q{c}" for c in range(1 if skip_q0 else 0, self.consumers)]
            self.q_full.arrive_expect_tx(Q_SLAB_BYTES * len(slabs))

            def land_q(tile_id=tile_id, slabs=slabs):
                for slab in slabs:
                    self.smem.write(slab, tile_id, "producer TMA")
                self.q_full.complete_tx(Q_SLAB_BYTES * len(slabs))

            self.async_events.append(land_q)
            for step in range(1, count):
                yield from self.load("k", tile_id, step, k_ring)
                yield from self.load_v(tile_id, step - 1, v_ring, q_phase, staged)
            if count > 0:
                yield from self.load_v(tile_id, count - 1, v_ring, q_phase, staged)
            ring = k_ring
            q_phase ^= 1
            previous = tile_id
        if self.persistent:  # no further tile: slot -1, q_full completes without bytes
            yield lambda qp=q_phase: self.q_empty.passed(qp ^ 1)
            self.slot = -1
            self.q_full.arrive()
        if self.transpose:  # sm90_stop_transposer: every V read, then the stop word
            pos = ring.copy()
            for _ in range(1 if self.mutant == "stop_one_stage" else self.stages):
                yield lambda s=pos.stage, ph=pos.phase: self.v_raw_empty[s].passed(ph ^ 1)
                pos.advance()
            self.stop = True
            self.v_full[ring.stage].arrive()
        if self.producer_stores:  # sm90_store_last_o: the last tile's O, consumer by consumer
            for c in range(self.consumers):
                yield lambda qp=q_phase, c=c: self.o_free[c].passed(qp ^ 1)
                yield from self.wait_store_reads(self.issue_o_store(c, previous, ring))

    def transposer(self):
        # sm90_transpose_v: V stages in ring order, each into its V^T stage, until stopped.
        ring = Ring(self.stages)
        while True:
            s = ring.stage
            yield lambda s=s, ph=ring.phase: self.v_full[s].passed(ph)
            if self.stop:
                return
            if self.mutant != "no_vt_release_wait":
                yield lambda s=s, ph=ring.phase: self.v_empty[s].passed(ph ^ 1)
            value = self.smem.content[f"v{s}"]
            self.smem.start_read(f"v{s}", value, "transposer")
            yield lambda: True
            self.smem.write(f"vt{s}", value, "transposer")
            self.smem.end_read(f"v{s}", "transposer")
            self.vt_full[s].arrive(TRANSPOSER_THREADS)
            self.v_raw_empty[s].arrive(TRANSPOSER_THREADS)
            ring.advance()

    def read_slot(self, who, expected):
        if self.persistent and self.slot != expected:
            raise ModelError(f"{who} reads tile slot {self.slot}, expected {expected}")

    # --- consumers ---
    def wgmma_wait(self, who, reads):
        yield lambda: True  # the wgmma still reads until the wait returns
        for name in reads:
            self.smem.end_read(name, who)

    def release_q_after_last_qk(self):
        if self.early:
            self.q_empty.arrive(WARPGROUP_THREADS)

    def epilogue(self, c, tile_id, ring, has_rows):
        # A consumer without rows stages O like the others but issues no store.
        who = f"c{c}"
        if self.staging == "regs":  # FP8 with V stages smaller than O: no shared memory
            return
            yield
        if self.staging == "vring":
            # Consumer c stages O in V stage (next + c) once every consumer has read the V last
            # there (one trip round the ring before that position), and hands it back to the
            # producer when the store has read it.
            pos = ring.copy()
            for _ in range(c):
                pos.advance()
            v = f"v{pos.stage}"
            # (FP8: the raw V stage, once the transposer has read it; the consumers read V^T)
            v_read = self.v_raw_empty if self.transpose else self.v_empty
            yield lambda s=pos.stage, ph=pos.phase: v_read[s].passed(ph ^ 1)
            self.smem.write(v, ("O", tile_id, c), who)
            if self.producer_stores:
                # Its thread 0 writes the slot and arrives; the producer stores (free_o_stage).
                self.o_slot[c] = (tile_id, has_rows)
                self.o_free[c].arrive()
                return
            if self.lone_store_wait:
                # The storing thread alone waits for the store's reads and arrives on o_free
                # last; the consumer's other threads arrive at once and go on to the next tile.
                self.o_free[c].arrive(self.o_free[c].count - 1)  # all but the storing thread

                def store_read(v=v, c=c, who=who, has_rows=has_rows):
                    if has_rows:
                        self.smem.end_read(v, who + " store")
                    self.o_free[c].arrive()
                if has_rows:
                    self.smem.start_read(v, ("O", tile_id, c), who + " store")
                self.async_events.append(store_read)
                return
            if has_rows:
                self.smem.start_read(v, ("O", tile_id, c), who + " store")
                yield lambda: True
                self.smem.end_read(v, who + " store")
            self.o_free[c].arrive(WARPGROUP_THREADS)
            return
        if self.staging == "own":
            # Own staging buffer: wait for the previous store's read (bulk wait_group.read), then
            # write; nobody waits after the store.
            o = f"o{c}"
            store = getattr(self, f"store{c}", None)
            if store is not None:
                yield lambda: True
                self.smem.end_read(o, who + " store")
            self.smem.write(o, ("O", tile_id), who)
            if has_rows:
                self.smem.start_read(o, ("O", tile_id), who + " store")
            setattr(self, f"store{c}", True if has_rows else None)
            return
        q = f"q{c}"
        # O is written into the slab with ordinary stores: the slab must still be this tile's
        # (a slab without rows holds whatever it held).
        if has_rows and self.smem.content[q] != tile_id:
            raise ModelError(f"{who} stages O into {q} holding {self.smem.content[q]}")
        self.smem.write(q, ("O", tile_id), who)
        if has_rows:
            self.smem.start_read(q, ("O", tile_id), who + " store")
            yield lambda: True
            self.smem.end_read(q, who + " store")
        if self.persistent:
            self.q_empty.arrive()

    def consume_tiles(self, c, tile_work):
        # The consumer's tile loop (kernel.cuh): wait for Q, read the slot, the tile's KV steps
        # (tile_work; none: hand Q back at once), epilogue; after the last tile, the -1 slot.
        who, ring, q_phase = f"c{c}", Ring(self.stages), 0
        for tile_id, count, skip_q0, dead in self.tiles:
            yield lambda qp=q_phase: self.q_full.passed(qp)
            self.read_slot(who, tile_id)
            has_rows = not (skip_q0 and c == 0)
            self.q_expect[c] = tile_id if has_rows else ANY
            if count == 0:
                self.release_q_after_last_qk()
            else:
                yield from tile_work(c, tile_id, count, ring, dead[c])
            yield from self.epilogue(c, tile_id, ring, has_rows)
            q_phase ^= 1
        if self.persistent:
            yield lambda qp=q_phase: self.q_full.passed(qp)
            self.read_slot(who, -1)

    def plain_tile(self, c, tile_id, count, ring, dead):
        who = f"c{c}"  # (the plain schedules pass no dead block: dead is 0)
        for step in range(count):
            s = ring.stage
            yield lambda s=s, ph=ring.phase: self.k_full[s].passed(ph)
            self.smem.start_read(f"q{c}", self.q_expect[c], who)
            self.smem.start_read(f"k{s}", (tile_id, step), who)
            yield from self.wgmma_wait(who, [f"q{c}", f"k{s}"])
            self.k_empty[s].arrive(WARPGROUP_THREADS)
            if step == count - 1:
                self.release_q_after_last_qk()
            yield lambda s=s, ph=ring.phase: self.v_full[s].passed(ph)
            self.smem.start_read(f"v{s}", (tile_id, step), who)
            yield from self.wgmma_wait(who, [f"v{s}"])
            self.v_empty[s].arrive(WARPGROUP_THREADS)
            ring.advance()

    def consumer_plain(self, c):
        yield from self.consume_tiles(c, self.plain_tile)

    def turn_begin(self, c):
        if not self.ping_pong:
            return
        generation = self.turn[c].sync(f"c{c}")
        yield lambda g=generation: self.turn[c].generation > g

    def turn_end(self, c):
        if self.ping_pong:
            self.turn[(c + 1) % self.consumers].arrive(f"c{c}")

    def pass_dead_blocks(self, c, dead, ring):
        # sm90_pass_dead_blocks: each block's turn handed on at once, then its waits and releases.
        for _ in range(dead):
            yield from self.turn_begin(c)
            self.turn_end(c)
            s = ring.stage
            yield lambda s=s, ph=ring.phase: self.k_full[s].passed(ph)
            self.k_empty[s].arrive(WARPGROUP_THREADS)
            yield lambda s=s, ph=ring.phase: self.pv_full(s).passed(ph)
            self.v_empty[s].arrive(WARPGROUP_THREADS)
            ring.advance()

    def overlap_tile(self, c, tile_id, count, ring, dead):
        # consumer_overlap.cuh: the dead blocks' turns, S of the first live KV step alone, then
        # S_t beside P V of t-1, then the last P V alone; every GEMM issue in a ping-pong turn.
        # Step t of the live steps reads the producer's load `dead + t` of the tile.
        yield from self.pass_dead_blocks(c, dead, ring)
        who, s = f"c{c}", ring.stage
        yield lambda s=s, ph=ring.phase: self.k_full[s].passed(ph)
        yield from self.turn_begin(c)
        self.smem.start_read(f"q{c}", self.q_expect[c], who)
        self.smem.start_read(f"k{s}", (tile_id, dead), who)
        self.turn_end(c)
        yield from self.wgmma_wait(who, [f"q{c}", f"k{s}"])
        self.k_empty[s].arrive(WARPGROUP_THREADS)
        if count - dead == 1:
            self.release_q_after_last_qk()
        leads = c == self.leader
        for step in range(dead + 1, count):
            prev = ring.copy()
            ring.advance()
            s, ps = ring.stage, prev.stage
            v_ready = lambda ps=ps, ph=prev.phase: self.pv_full(ps).passed(ph)
            if leads or not self.leader_waits:
                yield lambda s=s, ph=ring.phase: self.k_full[s].passed(ph)
            if not self.leader_waits:
                yield v_ready
            yield from self.turn_begin(c)
            self.smem.start_read(f"q{c}", self.q_expect[c], who)
            self.smem.start_read(f"k{s}", (tile_id, step), who)
            if leads and self.leader_waits:  # in its turn, after the S issue
                yield v_ready
            self.smem.start_read(self.pv_buf(ps), (tile_id, step - 1), who)
            self.turn_end(c)
            yield from self.wgmma_wait(who, [f"q{c}", f"k{s}"])  # wait_group<1>
            self.k_empty[s].arrive(WARPGROUP_THREADS)
            if step == count - 1:
                self.release_q_after_last_qk()
            yield from self.wgmma_wait(who, [self.pv_buf(ps)])  # wait_group<0>
            self.v_empty[ps].arrive(WARPGROUP_THREADS)
        s = ring.stage
        yield lambda s=s, ph=ring.phase: self.pv_full(s).passed(ph)
        yield from self.turn_begin(c)
        self.smem.start_read(self.pv_buf(s), (tile_id, count - 1), who)
        self.turn_end(c)
        yield from self.wgmma_wait(who, [self.pv_buf(s)])
        self.v_empty[s].arrive(WARPGROUP_THREADS)
        ring.advance()

    # What P V reads and waits for: V, or with the transposer V^T (smem_layout.cuh pv_tile).
    def pv_full(self, s):
        return self.vt_full[s] if self.transpose else self.v_full[s]

    def pv_buf(self, s):
        return f"vt{s}" if self.transpose else f"v{s}"

    def consumer_overlap(self, c):
        # One turn rotation for the CTA's life (PingPongTurns): start() once, finish() once
        # (NoTurns: neither); the leader takes the first turn and the hand-over of the last.
        if c == (self.leader - 1) % self.consumers and self.ping_pong:
            self.turn[self.leader].arrive(f"c{c}")
        yield from self.consume_tiles(c, self.overlap_tile)
        if c == self.leader:
            yield from self.turn_begin(c)
        for barrier in self.turn:
            if barrier.arrived and c == self.leader:
                raise ModelError(f"{barrier.name}: {barrier.arrived} arrivals left at the end")

    def run(self):
        plain = self.schedule in ("plain", "pplain")
        consumer = self.consumer_plain if plain else self.consumer_overlap
        roles = {"producer": self.producer()}
        roles.update({f"c{c}": consumer(c) for c in range(self.consumers)})
        if self.transpose:
            roles["transposer"] = self.transposer()
        waiting = {name: (lambda: True) for name in roles}
        while roles or self.async_events:
            ready = [n for n in roles if waiting[n]()]
            choices = [("role", n) for n in ready]
            choices += [("tma", i) for i in range(len(self.async_events))]
            if not choices:
                state = {n: "blocked" for n in roles}
                raise ModelError(f"deadlock: {state}")
            kind, what = self.rng.choice(choices)
            if kind == "tma":
                self.async_events.pop(what)()
                continue
            try:
                waiting[what] = next(roles[what])
            except StopIteration:
                del roles[what]
                del waiting[what]


def random_dead_blocks(rng, count, consumers):
    """Blocks each consumer passes as dead: none past count - 1 (each sees a key), and never
    fewer than a later consumer's, whose rows see more keys (a causal mask)."""
    dead, most = [], 0
    for _ in range(consumers):  # the last consumer first
        most = min(count - 1, most + rng.choice([0, 1, 2])) if count > 0 else 0
        dead.append(most)
    return tuple(reversed(dead))


TILE_STEPS = (0, 0, 1, 2, 3, 5)  # KV steps a tile may have, drawn evenly
# The dead-block mutant (consumer 0 leading while it passes dead blocks) fails only where another
# consumer's read beats the block's landing within a few of the model's moves: long tiles, and
# this many times the interleavings (1 in 300-1500 caught it in trials with TILE_STEPS).
DEAD_MUTANT_STEPS = (3, 5)
DEAD_MUTANT_RUN_FACTOR = 5


def random_tiles(rng, persistent, consumers=2, dead_blocks=False, steps=TILE_STEPS):
    # (tile id, KV steps, whether consumer 0's slab lies before row 0, each consumer's dead blocks)
    n = rng.randint(1, 4) if persistent else 1
    tiles = []
    for t in range(n):
        count = rng.choice(steps)
        dead = random_dead_blocks(rng, count, consumers) if dead_blocks else (0,) * consumers
        tiles.append((t, count, rng.random() < 0.3, dead))
    return tiles


def sweep(configs, runs, rng, consumers=2, dead_blocks=False):
    """Every (schedule, staging, transpose, ping_pong, leader_waits) config with `consumers`
    consumers under `runs` random interleavings, its stage counts and tiles drawn from rng (with
    dead blocks: the last consumer leads); False after the first failure."""
    leader = consumers - 1 if dead_blocks else 0
    for schedule, staging, transpose, ping_pong, leader_waits in configs:
        for i in range(runs):
            stages = rng.choice([2, 3])
            tiles = random_tiles(rng, schedule in ("persistent", "pplain"), consumers, dead_blocks)
            try:
                Cta(tiles, stages, schedule, random.Random(i), staging, transpose,
                    ping_pong=ping_pong, leader_waits=leader_waits, consumers=consumers,
                    leader=leader).run()
            except ModelError as e:
                print(f"FAIL {schedule} {staging} transpose={transpose} ping_pong={ping_pong} "
                      f"leader_waits={leader_waits} consumers={consumers} leader={leader} "
                      f"stages={stages} tiles={tiles} seed={i}: {e}")
                return False
        fp8 = ", FP8 V transposer" if transpose else ""
        turns = "" if ping_pong else ", no turns"
        dead = ", dead blocks" if dead_blocks else ""
        waits = f", consumer {leader} alone waiting for K and V" if leader_waits else ""
        print(f"ok {schedule} ({staging} O staging{fp8}{turns}{dead}){waits}, {consumers} "
              f"consumers: {runs} random interleavings")
    return True


def mutant_caught(name, runs, rng, dead_blocks=False, steps=TILE_STEPS, staging="own",
                  **cta_args):
    """Whether a persistent CTA with O staged as `staging` and cta_args fails within `runs`."""
    for i in range(runs):
        stages = rng.choice([2, 3])
        tiles = random_tiles(rng, True, cta_args.get("consumers", 2), dead_blocks, steps)
        try:
            Cta(tiles, stages, "persistent", random.Random(i), staging, **cta_args).run()
        except ModelError:
            print(f"ok mutant {name} caught")
            return True
    print(f"FAIL the mutant {name} passed {runs} interleavings")
    return False


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    rng = random.Random(7)
    if not sweep((("plain", "qslab", False, True, False), ("overlap", "qslab", False, True, False),
                  ("persistent", "qslab", False, True, False),
                  ("persistent", "own", False, True, False),
                  ("persistent", "vring", False, True, False),
                  ("pplain", "qslab", False, True, False), ("pplain", "own", False, True, False),
                  ("pplain", "vring", False, True, False),
                  ("persistent", "own", True, True, False),
                  ("persistent", "regs", True, True, False),
                  ("persistent", "own", True, False, False),
                  ("persistent", "regs", True, False, False),
                  ("persistent", "vring", True, True, False),
                  ("persistent", "vring", True, False, False)), runs, rng):
        return 1
    # Consumer 0 alone waiting for a step's K and V: safe under the turns, for every staging
    # (draws of its own, so the sections above and below keep theirs).
    leader_rng = random.Random(11)
    if not sweep((("overlap", "qslab", False, True, True),
                  ("persistent", "qslab", False, True, True),
                  ("persistent", "own", False, True, True),
                  ("persistent", "vring", False, True, True),
                  ("persistent", "own", True, True, True)), runs, leader_rng):
        return 1
    # Three consumers (the d64 and d128 rows of 192-row tiles: O in the Q slab or a buffer of
    # its own, never a V stage), with every consumer waiting and with consumer 0 alone: the
    # others' turns of a step follow consumer 0's through the turns of those before them.
    three_rng = random.Random(13)
    three = [(schedule, staging, False, True, leader_waits) for leader_waits in (False, True)
             for schedule, staging in (("overlap", "qslab"), ("persistent", "qslab"),
                                       ("persistent", "own"))]
    if not sweep(three, runs, three_rng, consumers=3):
        return 1
    # Dead blocks (the causal rows that pass them, three consumers like the d64 / d128 rows of
    # 192-row tiles, and two), every consumer waiting and the last consumer alone: it passes the
    # fewest, so each block another consumer computes on is one it waited for in its turn.
    dead_rng = random.Random(17)
    for consumers in (2, 3):
        dead = [(schedule, staging, False, True, leader_waits) for leader_waits in (False, True)
                for schedule, staging in (("overlap", "qslab"), ("persistent", "qslab"),
                                          ("persistent", "own"))]
        if not sweep(dead, runs, dead_rng, consumers=consumers, dead_blocks=True):
            return 1
    # The model must see the mistakes it is meant to catch: the two FP8 ones, and consumer 0
    # alone waiting without turns (consumer 1 then reads stages that have not landed).
    for mutant in ("stop_one_stage", "no_vt_release_wait"):
        if not mutant_caught(f"FP8 {mutant}", runs, rng, transpose=True, mutant=mutant):
            return 1
    if not mutant_caught("consumer 0 alone waiting without turns", runs, leader_rng,
                         ping_pong=False, leader_waits=True):
        return 1
    if not mutant_caught("consumer 0 alone waiting without turns, 3 consumers", runs, three_rng,
                         ping_pong=False, leader_waits=True, consumers=3):
        return 1
    # Consumer 0 leading where it passes dead blocks: its waits for them come after its turns.
    if not mutant_caught("consumer 0 alone waiting, passing dead blocks",
                         DEAD_MUTANT_RUN_FACTOR * runs, dead_rng, dead_blocks=True,
                         steps=DEAD_MUTANT_STEPS, leader_waits=True, consumers=3):
        return 1
    # The producer storing O staged in the V ring (Sm90Switch::kProducerStoresO; the 16-bit
    # d256 rows take it with turns and consumer 0's waits), with and without the FP8 transposer
    # and turns; and its mutant, V loaded where a store may still read.
    store_rng = random.Random(19)
    if not sweep((("persistent", "vring_producer", False, True, False),
                  ("persistent", "vring_producer", False, True, True),
                  ("persistent", "vring_producer", True, True, False),
                  ("persistent", "vring_producer", True, False, False)), runs, store_rng):
        return 1
    if not mutant_caught("store_no_read_wait", runs, store_rng, staging="vring_producer",
                         mutant="store_no_read_wait"):
        return 1
    return 0

if __name__ == "__main__":
    sys.exit(main())
