// Every named-barrier id the Hopper kernels use, in one place. Id 0 is __syncthreads'; the
// hardware has 16. The general kernel (kernel.cuh) and the decode kernel (decode_kernel.cuh) are
// separate launches, so their ids may repeat.
#pragma once

#include <cstdint>

namespace flashcore::detail {

enum class Sm90NamedBarrier : uint32_t {
  // General kernel: consumer c's epilogue, its 128 threads (epilogue.cuh), ids 1 .. 3.
  kEpilogueFirst = 1,
  // General kernel: consumer c's turn to issue GEMMs, 256 threads: the owner's sync plus the
  // previous consumer's arrival (consumer_overlap.cuh), ids 5 .. 7.
  kTurnFirst = 5,
  // General kernel, FP8: the transposer's 96 threads, between zeroing a V block's rows past the
  // keys and transposing them (v_transpose.cuh).
  kTransposer = 8,
  // Decode kernel: every thread's GEMMs on a K/V stage completed before thread 0 reloads it.
  kDecodeStageFree = 1,
};

constexpr int kSm90MaxConsumers = 3;
constexpr int kSm90NamedBarrierCount = 16;

constexpr uint32_t sm90_barrier_id(Sm90NamedBarrier first, int index = 0) {
  return static_cast<uint32_t>(first) + static_cast<uint32_t>(index);
}

static_assert(sm90_barrier_id(Sm90NamedBarrier::kEpilogueFirst, kSm90MaxConsumers - 1) <
                  sm90_barrier_id(Sm90NamedBarrier::kTurnFirst),
              "the epilogue and turn barriers of the general kernel must not overlap");
static_assert(sm90_barrier_id(Sm90NamedBarrier::kTurnFirst, kSm90MaxConsumers - 1) <
                  sm90_barrier_id(Sm90NamedBarrier::kTransposer),
              "the turn and transposer barriers of the general kernel must not overlap");
static_assert(sm90_barrier_id(Sm90NamedBarrier::kTransposer) < kSm90NamedBarrierCount,
              "named barrier ids end at 15");

}  // namespace flashcore::detail
