// Host emulation stand-in: the opaque identities are plain identities on the host.
#pragma once
#include <cstdint>
namespace flashcore::detail {
inline int thread_index_unhoisted() { return static_cast<int>(threadIdx.x); }
inline int unhoisted(int value) { return value; }
inline int64_t unhoisted(int64_t value) { return value; }
}  // namespace flashcore::detail
