// Programmatic dependent launch (sm90: griddepcontrol). A kernel launched with the
// programmatic-stream-serialization attribute may start while the kernel before it on the stream
// still runs, once every CTA of that one has called grid_dependency_launch_dependents (or ended):
// its CTAs get their SMs and run their prologue early, and grid_dependency_wait holds them until
// the earlier kernel has completed and its memory is visible. Both are no-ops for a kernel
// launched without the attribute.
#pragma once

namespace flashcore::detail {

// Blocks the thread until the kernels this one depends on have completed and their writes are
// visible: call it before the first global-memory access they could conflict with.
__device__ __forceinline__ void grid_dependency_wait() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

// Lets the next kernel on the stream (launched with the attribute) be scheduled once every CTA of
// this one has called it or ended. Says nothing about this kernel's writes: the next one still
// waits for them in grid_dependency_wait.
__device__ __forceinline__ void grid_dependency_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

}  // namespace flashcore::detail
