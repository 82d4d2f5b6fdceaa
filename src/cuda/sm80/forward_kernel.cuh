// The sm80 (mma.sync) attention forward kernel: FlashAttention-2's algorithm.
//
// One CTA per (query block of kBlockM rows, head, batch); kWarps warps, each owning
// kRowsPerWarp query rows. KV tiles are visited from the last to the first, so the masked tiles
// (the seqlen_k tail, the causal diagonal) come first and the mask test leaves the loop early.
//
//   prologue: cp.async Q, K_last                                       [group]
//   for tile j (last .. first):
//     wait all; barrier          K_j (and Q) landed; every warp is done with V_{j+1}
//     cp.async V_j                                                     [group]
//     S = Q K_j^T                (overlaps the V_j load)
//     mask S if j >= first_masked
//     wait all; barrier          V_j landed; every warp is done with K_j
//     cp.async K_{j-1}                                                 [group]
//     online softmax: P = exp2(S * scale_log2 - max), rescale O       (overlaps the K load)
//       (or issue K_{j-1} here instead: Sm80Tile::k_load_after_softmax)
//     O += P V_j                 (P from registers, V via ldmatrix.trans)
//   epilogue: O / sum -> smem (reusing Q's space) -> coalesced 16-byte stores; lse
//
// Shared memory: Q (kBlockM rows) | K (kBlockN rows) | V (kBlockN rows), all swizzled.
//
// Sequence layouts: lengths, offsets and the causal alignment of batch entry b come from the
// params' accessors (dense, varlen or kv cache alike); the grid is sized by the longest sequence
// (params.seqlen_q) and a CTA past its sequence's end exits. K/V addressing is the policy
// Sm80KvAddress<kPagedKv> (kv_address.cuh): evenly strided rows, or a paged cache.
#pragma once

#include <cstdint>

#include "common/params.h"
#include "cuda/common/mask.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/sm80/epilogue.cuh"
#include "cuda/sm80/kv_address.cuh"
#include "cuda/sm80/online_softmax.cuh"
#include "cuda/sm80/smem_tile.cuh"
#include "cuda/sm80/tile_config.h"
#include "cuda/sm80/warp_gemm.cuh"

namespace flashcore::detail {

template <DType kDType, int kHeadDim, bool kCausal>
struct Sm80ForwardTraits : Sm80TileShape<kHeadDim, kCausal, sizeof(element_t<kDType>)> {};

template <DType kDType, int kHeadDim, bool kCausal, bool kPagedKv = false>
__global__ void __launch_bounds__(Sm80ForwardTraits<kDType, kHeadDim, kCausal>::kThreads, 1)
    sm80_forward_kernel(const __grid_constant__ AttentionParams params) {
  using Shape = Sm80ForwardTraits<kDType, kHeadDim, kCausal>;
  using Element = element_t<kDType>;
  using KvAddress = Sm80KvAddress<kPagedKv>;
  constexpr int kBlockM = Shape::kBlockM;
  constexpr int kBlockN = Shape::kBlockN;
  constexpr int kThreads = Shape::kThreads;

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t smem_q = shared_address(smem);
  const uint32_t smem_k = smem_q + static_cast<uint32_t>(Shape::kQBytes);
  const uint32_t smem_v = smem_k + static_cast<uint32_t>(Shape::kKvBytes);
  // Past V: what the K/V addressing stages (a paged cache's page-table entries; dense: none).
  int32_t* const kv_stage = reinterpret_cast<int32_t*>(smem + Shape::kSmemBytes);

  // Causal: the last query blocks see the most keys; launch them first so the long CTAs start
  // early and the short ones fill the tail of the wave.
  const int m_block =
      kCausal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp_row0 = (tid >> 5) * Shape::kRowsPerWarp;  // first CTA row of this warp

  const MaskPolicy<kCausal> mask(params, batch);
  const int m_begin = m_block * kBlockM;
  if (m_begin >= mask.seqlen_q) return;
  const KvTileRange tiles = mask.kv_tiles(m_begin, kBlockM, kBlockN);

  // The K and V head pointers are CTA-uniform but would hold 4 registers across the loop in a
  // kernel that sits at the 255-register limit (the compiler hoists them, and spills). Thread 0
  // parks them in shared memory; the first barrier of the loop publishes them, and each tile load
  // reads them back with one LDS. The prologue's K load uses the values it computed itself.
  // (`static` is implied for __shared__; spelled out so the host emulator in dev/sm80 shares it.)
  static __shared__ const Element* kv_head_base[2];
  const int kv_head = params.kv_head_of(head);
  const Element* k_head = static_cast<const Element*>(params.k) +
                          KvAddress::head_offset(params, false, batch, kv_head);
  if (tid == 0) {
    kv_head_base[0] = k_head;
    kv_head_base[1] = static_cast<const Element*>(params.v) +
                      KvAddress::head_offset(params, true, batch, kv_head);
  }
  // Tile n of K (of V) into its buffer; rows past the sequence's end are zero-filled.
  const auto load_k = [&](const Element* head, int n) {
    KvAddress::template load_tile<kBlockN, kHeadDim, kThreads>(
        smem_k, head, params.k_batch_stride, params.k_row_stride, params, kv_stage, n,
        mask.seqlen_k - n * kBlockN);
  };
  const auto load_v = [&](int n) {
    // Tile n - 1's staging rides in V_n's group: waited for before K_{n-1} is issued.
    if (n > tiles.begin) {
      KvAddress::template stage_next<kBlockN, kThreads>(params, batch, n - 1, mask.seqlen_k,
                                                        kv_stage);
    }
    KvAddress::template load_tile<kBlockN, kHeadDim, kThreads>(
        smem_v, kv_head_base[1], params.v_batch_stride, params.v_row_stride, params, kv_stage, n,
        mask.seqlen_k - n * kBlockN);
  };

  // Issues K_{n-1} when tile n is not the last one visited (the tile table picks the spot).
  const auto load_next_k = [&](int n) {
    if (n > tiles.begin) {
      load_k(kv_head_base[0], n - 1);
      cp_async_commit();
    }
  };

  float acc_o[Shape::kMTiles][Shape::kOBlocks][4];
#pragma unroll
  for (int i = 0; i < Shape::kMTiles; ++i) {
#pragma unroll
    for (int d = 0; d < Shape::kOBlocks; ++d) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[i][d][e] = 0.0f;
    }
  }
  OnlineSoftmax<Shape::kMTiles> softmax;

  // No tile to visit (seqlen_k == 0, or causal rows that all lie above the diagonal): nothing is
  // loaded, not even Q, and the epilogue writes out = 0 and lse = -inf (sum 0, max -inf).
  if (tiles.count() > 0) {
    const Element* q_tile =
        static_cast<const Element*>(params.q) + params.q_offset(batch, m_begin, head);
    load_tile_async<kBlockM, kHeadDim, kThreads>(smem_q, q_tile, params.q_row_stride,
                                                 mask.seqlen_q - m_begin);
    const int last = tiles.end - 1;
    KvAddress::template stage_first<kBlockN, kThreads>(params, batch, last, mask.seqlen_k,
                                                       kv_stage);
    load_k(k_head, last);
    cp_async_commit();

    for (int n = last; n >= tiles.begin; --n) {
      cp_async_wait_group<0>();
      __syncthreads();
      load_v(n);
      cp_async_commit();

      float s[Shape::kMTiles][Shape::kSBlocks][4];
#pragma unroll
      for (int i = 0; i < Shape::kMTiles; ++i) {
#pragma unroll
        for (int j = 0; j < Shape::kSBlocks; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s[i][j][e] = 0.0f;
        }
      }
      warp_gemm_qk<kDType, Shape, kHeadDim>(s, smem_q, smem_k, warp_row0);
      if (n >= tiles.first_masked) {
        apply_mask(s, mask, m_begin + warp_row0, n * kBlockN, lane);
      }

      cp_async_wait_group<0>();
      __syncthreads();
      if (!Shape::kLoadKAfterSoftmax) load_next_k(n);

      softmax.update(s, acc_o, params.softmax_scale_log2, lane);
      uint32_t p_frag[Shape::kMTiles][Shape::kPvSteps][4];
      pack_p_fragments<kDType, Shape>(p_frag, s);
      if (Shape::kLoadKAfterSoftmax) load_next_k(n);
      warp_gemm_pv<kDType, Shape, kHeadDim>(acc_o, p_frag, smem_v);
    }
  }

  // O reuses Q's rows: each warp overwrites only the Q rows it alone read, and no cp.async is
  // in flight (the last iteration issues none and waited for V).
  write_output<kDType, Shape, kHeadDim>(acc_o, softmax, smem, params, batch, head, m_begin,
                                        mask.seqlen_q, warp_row0, tid);
}

}  // namespace flashcore::detail
