// Which SM each CTA of a one-CTA-per-SM launch lands on (blockIdx.x -> %smid), and, for
// clusters of 2, which SMs the hardware pairs (a cluster's CTAs share a GPC). Asks whether
// consecutive CTAs of the persistent kernel sit on one TPC / GPC, where their K/V loads of one
// head could meet (docs/kernels.md, run 79).
//   nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a dev/sm90/smid_map.cu -o /tmp/smid_map
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

__global__ void record_smid(int* smid) {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  if (threadIdx.x == 0) smid[blockIdx.x] = static_cast<int>(id);
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  // Enough shared memory that two CTAs cannot share an SM, as with the attention kernel.
  const int smem = 200 * 1024;
  cudaFuncSetAttribute(record_smid, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  int* smid = nullptr;
  cudaMalloc(&smid, sms * sizeof(int));
  std::vector<int> host(sms);
  for (int cluster : {1, 2}) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(sms);
    config.blockDim = dim3(128);
    config.dynamicSmemBytes = smem;
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = cluster;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    const cudaError_t err = cudaLaunchKernelEx(&config, record_smid, smid);
    cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      std::printf("cluster %d: %s\n", cluster, cudaGetErrorString(err));
      continue;
    }
    cudaMemcpy(host.data(), smid, sms * sizeof(int), cudaMemcpyDeviceToHost);
    std::printf("cluster %d, blockIdx:smid", cluster);
    for (int b = 0; b < sms; ++b) std::printf(" %d:%d", b, host[b]);
    std::printf("\n");
  }
  return 0;
}
