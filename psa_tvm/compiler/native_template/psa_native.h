// psa-tvm native run time: the data model of the generated kernel table.
//
// `psa_tvm/compiler/native.py` writes one translation unit per artifact directory: the embedded
// fatbins, a `Kernel` record per manifest kernel (parameter order, launch-dimension function,
// variant), a `Build` per manifest build, a `Config` per (key_dim, num_heads, dtype) with the
// build each pass uses, and the LLVM-built CPU kernels. It then includes psa_native_impl.h, which
// holds everything that does not depend on the manifest: validation, kernel choice, launching,
// the CPU path and the exported TVM-FFI functions (see docs/native.md).
#ifndef PSA_NATIVE_H_
#define PSA_NATIVE_H_

#include <tvm/ffi/c_api.h>

#include <cstddef>
#include <cstdint>

#ifndef PSA_NATIVE_CUDA
#define PSA_NATIVE_CUDA 1
#endif

namespace psa_native {

// Tensor roles a kernel parameter or shape symbol refers to (the manifest's tensor names).
enum Role : int { kLo = 0, kHi, kOut, kG, kDlo, kDhi, kNumRoles };
enum Pass : int { kForward = 0, kBackward = 1 };
enum ParamKind : int { kPtr = 0, kI32 = 1, kI64 = 2 };

constexpr int kMaxParams = 16;
constexpr int kMaxSymbols = 8;

struct Param {
  ParamKind kind;
  int index;  // a Role for pointers, a symbol index for scalars
  const char* name;
};

struct Symbol {
  const char* name;
  int role;       // tensor whose shape gives the symbol (kernel view: lo [B*nh, N, kd], ...)
  int axis;       // axis of that shape
  int64_t divisor;
};

// Launch dimensions for concrete symbol values: out = grid x, y, z, block x, y, z.
using DimsFn = void (*)(const int64_t* symbols, __int128* out);

struct Kernel {
  int pass;
  int vec;      // width along N (the kernel needs N % vec == 0)
  int vec_kd;   // width along kd (absent in the manifest: vec)
  int index64;  // 1: int64 indexing
  const char* entry;
  int num_params;
  Param params[kMaxParams];
  int num_symbols;
  Symbol symbols[kMaxSymbols];
  DimsFn dims;
  uint32_t dynamic_smem_bytes;
  int64_t min_numel;  // runs only for calls of at least this many merged elements
  int64_t max_numel;  // > 0: runs only for calls of at most this many merged elements
  int64_t min_n;      // with max_n > 0: runs only for min_n <= N <= max_n
  int64_t max_n;      // 0: any N
};

struct Binary {
  const unsigned char* data;
  size_t size;
  const int* sass;  // SASS architectures, as major*10+minor
  int num_sass;
  const int* ptx;   // PTX virtual architectures
  int num_ptx;
};

struct Build {
  const char* source;    // the manifest's "source" (names the build in messages)
  const char* schedule;
  const Binary* binaries;
  int num_binaries;
  const Kernel* kernels;  // per (pass, index dtype): widest (vec_kd, rank) first
  int num_kernels;
};

struct ArchChoice {
  int arch;      // major*10+minor
  int build[2];  // build index per pass, -1: none
};

// One LLVM-built CPU kernel: its function and the run time's symbol for it (psa_tvm.runtime.cpu).
struct CpuKernel {
  TVMFFISafeCallType fn;  // nullptr: not built
  const char* symbol;
};

// The scheduled CPU kernels of one configuration (psa_tvm.compiler.cpu.scheduled_cpu_kernels);
// the choice among them is psa_tvm.runtime.cpu.forward_choice / backward_choice.
struct CpuSet {
  CpuKernel forward;            // any N: (lo, hi, out5, N)
  CpuKernel backward;           // any N: (g5, d_lo, d_hi, N)
  int forward_vec;              // > 1: forward_vec_kernel for N % forward_vec == 0
  CpuKernel forward_vec_kernel; // (lo, hi, out5, N / forward_vec)
  int pairs_forward_vec;        // > 0: 16-bit on int32 words, N % (2 * pairs_forward_vec) == 0
  CpuKernel pairs_forward;      // (lo32, hi32, out32, N / (2 * pairs_forward_vec))
  bool pairs_backward_ok;       // 16-bit on int32 words, N even
  CpuKernel pairs_backward;     // (g32, d_lo32, d_hi32, N / 2)
  CpuKernel forward_prefetch;   // forward / backward prefetching each slice first (calls whose
  CpuKernel backward_prefetch;  // merged tensor reaches psa_tvm_cpu_prefetch_bytes())
  CpuKernel forward_lines;      // aligned whole-line stores (x86-64-v4), on CPUs that
                                // psa_tvm_cpu_lines() picks; the calls: ChooseCpu
};

struct Config {
  int64_t key_dim;
  int64_t num_heads;
  uint8_t dtype_code;  // DLDataTypeCode
  uint8_t dtype_bits;
  const char* dtype_name;
  int default_build[2];  // for GPUs without a tuned choice
  const ArchChoice* arch_choices;
  int num_arch_choices;
  const CpuSet* cpu;  // LLVM-built CPU kernels (nullptr: none)
};


// ------------------------------------------------------------------ the attention layout family
// psa_tvm/layouts.py: ops with S streams of key_dim channels per head (pack, merges, gradient
// gathers). Their kernels' pointer parameters and symbols index the call's tensors in the op's
// order for the pass (StreamOp.tensor_names: inputs first, output last).
constexpr int kMaxStreamTensors = 8;
constexpr int kMaxStreamRank = 6;

// One tensor's shape as the kernels view it, for the call's B and N (dims that are neither are
// constants of the configuration).
enum StreamVar : int8_t { kConst = 0, kVarB = 1, kVarN = 2 };
struct StreamShape {
  int ndim;
  int64_t extent[kMaxStreamRank];
  int8_t var[kMaxStreamRank];
};

struct StreamTensors {
  int num;  // 0: the op has no such pass
  const char* names[kMaxStreamTensors];
  StreamShape shapes[kMaxStreamTensors];
  bool flat[kMaxStreamTensors];  // the NCHW side and the scatter's output: any contiguous shape
                                 // of the view's size (PsaStreamRuntimeOp.check)
};

struct StreamConfig {
  int op;  // index into kStreamOps
  int64_t key_dim;
  int64_t num_heads;
  int64_t num_streams;
  uint8_t dtype_code;
  uint8_t dtype_bits;
  const char* dtype_name;
  int build[2];  // kBuilds index per pass (forward = gather, backward = scatter), -1: none
  StreamTensors tensors[2];
};

}  // namespace psa_native

#endif  // PSA_NATIVE_H_
