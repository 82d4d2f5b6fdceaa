// flashcore-bench built without CUDA: no GPU is ever present and device memory cannot exist.
#include "flashcore/flashcore.h"
#include "gpu.h"

namespace flashcore::bench {
namespace {

constexpr const char* kNoCuda =
    "flashcore-bench was built without CUDA: nvcc was not found at configure time";

[[noreturn]] void no_cuda() { throw Error(kNoCuda); }

}  // namespace

bool gpu_present() { return false; }
std::string gpu_absence_reason() { return kNoCuda; }
std::string gpu_name() { return ""; }
int64_t gpu_l2_bytes() { return 0; }
int64_t gpu_memory_bytes() { return 0; }

DeviceBuffer::DeviceBuffer(size_t /*bytes*/) { no_cuda(); }
DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer::DeviceBuffer(DeviceBuffer&& /*other*/) noexcept {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& /*other*/) noexcept { return *this; }
void DeviceBuffer::upload(size_t, const void*, size_t) { no_cuda(); }
void DeviceBuffer::download(size_t, void*, size_t) const { no_cuda(); }
void DeviceBuffer::copy_within(size_t, size_t, size_t) { no_cuda(); }
void DeviceBuffer::fill(uint8_t) { no_cuda(); }
void gpu_synchronize() {}
std::vector<double> time_gpu_runs(const std::function<void(int)>&, int, int) { no_cuda(); }

}  // namespace flashcore::bench
