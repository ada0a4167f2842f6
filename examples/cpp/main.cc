// A C++ consumer of the psa-tvm native library: load it with TVM-FFI's Module API, run the
// forward and backward merge on raw buffers (CPU, or CUDA on a stream of our own), check the
// results bit for bit against a loop, and show a refused call. No Python anywhere.
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#ifdef PSA_EXAMPLE_CUDA
#include <cuda_runtime.h>
#define CUDA_OK(x)                                                              \
  do {                                                                          \
    cudaError_t e = (x);                                                        \
    if (e != cudaSuccess) {                                                     \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e));              \
      return 2;                                                                 \
    }                                                                           \
  } while (0)
#endif

namespace ffi = tvm::ffi;

struct View {  // a DLTensor over memory we own
  DLTensor t{};
  std::vector<int64_t> shape;
  View(void* data, std::vector<int64_t> s, DLDevice dev) : shape(std::move(s)) {
    t.data = data;
    t.device = dev;
    t.ndim = static_cast<int>(shape.size());
    t.dtype = DLDataType{kDLFloat, 32, 1};
    t.shape = shape.data();
  }
};

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s LIBRARY.so [cpu|cuda]\n", argv[0]);
    return 2;
  }
  const std::string where = argc > 2 ? argv[2] : "cpu";
  const int64_t B = 2, NH = 4, KD = 32, H = 5, W = 7, N = H * W, C = 2 * NH * KD;
  const int64_t half_numel = B * NH * N * KD, merged_numel = B * C * N;

  ffi::Module lib = ffi::Module::LoadFromFile(argv[1]);
  ffi::Function forward = lib->GetFunction("merge_forward").value();
  ffi::Function backward = lib->GetFunction("merge_backward").value();

  std::vector<float> lo(half_numel), hi(half_numel), out(merged_numel, -1.f);
  std::vector<float> d_lo(half_numel, -1.f), d_hi(half_numel, -1.f);
  for (int64_t i = 0; i < half_numel; ++i) {
    lo[i] = static_cast<float>(i) * 0.5f + 1.f;
    hi[i] = -static_cast<float>(i) - 3.f;
  }

  DLDevice dev{kDLCPU, 0};
  float *p_lo = lo.data(), *p_hi = hi.data(), *p_out = out.data();
  float *p_dlo = d_lo.data(), *p_dhi = d_hi.data();
#ifdef PSA_EXAMPLE_CUDA
  cudaStream_t stream = nullptr;
  if (where == "cuda") {
    dev = DLDevice{kDLCUDA, 0};
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    float** ptrs[] = {&p_lo, &p_hi, &p_out, &p_dlo, &p_dhi};
    const int64_t sizes[] = {half_numel, half_numel, merged_numel, half_numel, half_numel};
    for (int i = 0; i < 5; ++i) CUDA_OK(cudaMalloc(ptrs[i], sizes[i] * sizeof(float)));
    CUDA_OK(cudaMemcpy(p_lo, lo.data(), half_numel * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(p_hi, hi.data(), half_numel * 4, cudaMemcpyHostToDevice));
    // The library launches on the environment stream of the tensors' device: ours.
    TVMFFIEnvSetStream(kDLCUDA, 0, stream, nullptr);
  }
#else
  if (where == "cuda") {
    std::fprintf(stderr, "built without the CUDA toolkit\n");
    return 2;
  }
#endif
  View v_lo(p_lo, {B * NH, N, KD}, dev), v_hi(p_hi, {B * NH, N, KD}, dev);
  View v_out(p_out, {B, C, H, W}, dev);
  View v_dlo(p_dlo, {B * NH, N, KD}, dev), v_dhi(p_dhi, {B * NH, N, KD}, dev);

  forward(&v_lo.t, &v_hi.t, &v_out.t);
  backward(&v_out.t, &v_dlo.t, &v_dhi.t);  // d_merged = the merged output: d_lo == lo again

  // A refused call: out has the wrong shape. Nothing is written, a ValueError comes back.
  View v_bad(p_out, {B, C - 1, H, W}, dev);
  try {
    forward(&v_lo.t, &v_hi.t, &v_bad.t);
    std::fprintf(stderr, "a bad call was accepted\n");
    return 1;
  } catch (const ffi::Error& err) {
    std::printf("refused as expected: %s: %s\n", err.kind().c_str(), err.message().c_str());
  }

#ifdef PSA_EXAMPLE_CUDA
  if (where == "cuda") {
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(out.data(), p_out, merged_numel * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(d_lo.data(), p_dlo, half_numel * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(d_hi.data(), p_dhi, half_numel * 4, cudaMemcpyDeviceToHost));
  }
#endif
  // merged[b, h*2kd + s*kd + d, n] = (s ? hi : lo)[b*nh + h, n, d]
  int64_t wrong = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t s = 0; s < 2; ++s)
        for (int64_t d = 0; d < KD; ++d)
          for (int64_t n = 0; n < N; ++n) {
            const float want = (s ? hi : lo)[((b * NH + h) * N + n) * KD + d];
            const float got = out[((b * C) + h * 2 * KD + s * KD + d) * N + n];
            wrong += std::memcmp(&want, &got, sizeof(float)) != 0;
          }
  wrong += std::memcmp(d_lo.data(), lo.data(), half_numel * 4) != 0;
  wrong += std::memcmp(d_hi.data(), hi.data(), half_numel * 4) != 0;
  std::printf("psa-tvm native library on %s: forward + backward %s\n", where.c_str(),
              wrong ? "WRONG" : "exact");
  return wrong ? 1 : 0;
}
