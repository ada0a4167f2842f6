// docs/perf.md v35: what the two cluster prototypes (pair35.cu, scatter35.cu) share.
#pragma once
#include <cooperative_groups.h>
#include <cuda_runtime.h>

namespace cg = cooperative_groups;

constexpr int kKd = 32;  // key_dim: one 128-byte float32 source line per position
constexpr int kLoadUnroll = 4;

// One cluster of `clusters` CTAs of `threads` per (bh, half) unit of a call of `rows` = B * nh,
// each with `smem` bytes of dynamic shared memory (opted in first). Returns a cudaError_t, or
// 3 where the tile is past what a CTA may have.
template <typename... Params, typename... Args>
static int launch_clusters(void (*kernel)(Params...), int clusters, int threads, int rows,
                           size_t smem, void* stream, Args... args) {
  if (smem > 227 * 1024) return 3;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(rows * 2 * clusters);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = clusters;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  err = cudaLaunchKernelEx(&config, kernel, args...);
  return err != cudaSuccess ? err : static_cast<int>(cudaGetLastError());
}
