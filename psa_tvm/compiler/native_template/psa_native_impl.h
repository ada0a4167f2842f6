// psa-tvm native run time: validation, kernel choice, launch, CPU path and TVM-FFI exports.
//
// Included once, at the end of the generated translation unit, after the tables
// (kBuilds, kConfigs, kManifestDigest) that psa_native.h describes. Nothing here depends on a
// particular manifest: new variants and schedules need no edit of this file.
//
// Rules (the same as psa_tvm/runtime, see docs/native.md):
// * every check happens before any allocation or launch; a rejected call writes nothing;
// * errors name the argument, what was expected and what was received (ValueError/TypeError);
// * index dtype: int32 if B*2*nh*kd*N + 2**20 <= 2**31-1, else int64;
// * among the kernels of the pass and index dtype, candidates have N % vec == 0, every
//   tensor's data pointer aligned to max(vec, vec_kd) * itemsize (the pointers' common
//   alignment counted up to 16 bytes, as runtime/plan.py does), numel >= min_numel (and
//   <= max_numel where it is set) and N in the kernel's range (max_n == 0: any N); the widest (vec_kd, rank) wins (rank: 2*vec; a
//   shifted kernel, any N, ranks just below an 8-byte N side), at equal rank a kernel with an
//   N range (a whole-row shifted backward), then the larger min_numel (a split shifted
//   backward);
// * grid x <= 2**31-1, y, z <= 65535; numel == 0: nothing to launch;
// * CUDA launches go to TVMFFIEnvGetStream(kDLCUDA, device) (torch's current stream when called
//   from Python with torch tensors) on the tensors' device.
#ifndef PSA_NATIVE_IMPL_H_
#define PSA_NATIVE_IMPL_H_

#include <tvm/ffi/any.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "psa_native.h"

// Every TVM_FFI_THROW ends its function; GCC cannot see that the builder throws.
#pragma GCC diagnostic ignored "-Wreturn-type"

#if PSA_NATIVE_CUDA
#include <cuda_runtime.h>
#endif

namespace psa_native {

namespace ffi = tvm::ffi;

extern const Build kBuilds[];
extern const int kNumBuilds;
extern const Config kConfigs[];
extern const int kNumConfigs;
extern const char kManifestDigest[];
extern const char kLibraryInfo[];

constexpr int64_t kInt32Max = 2147483647;
constexpr int64_t kInt32Margin = int64_t{1} << 20;  // tail tiles index up to a tile past the end
constexpr int64_t kGridLimits[3] = {kInt32Max, 65535, 65535};
constexpr int64_t kBlockLimit = 1024;
constexpr uintptr_t kMaxAlignment = 16;
constexpr int64_t kMaxKeyDim = int64_t{1} << 60;  // 2*key_dim never overflows

// Error kind for "this library has no build for that" (Python: psa_tvm's ArtifactNotFoundError).
#define PSA_THROW_MISSING TVM_FFI_THROW(PsaArtifactNotFound)

// ------------------------------------------------------------------ formatting
inline std::string ShapeStr(const int64_t* shape, int ndim) {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < ndim; ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

inline std::string I128Str(__int128 v) {
  if (v == 0) return "0";
  const bool negative = v < 0;
  std::string digits;
  for (; v != 0; v /= 10) digits.insert(digits.begin(), static_cast<char>('0' + (negative ? -(v % 10) : v % 10)));
  return negative ? "-" + digits : digits;
}

inline bool IsCpu(DLDevice d) { return d.device_type == kDLCPU || d.device_type == kDLCUDAHost; }

inline std::string DeviceStr(DLDevice d) {
  if (IsCpu(d)) return "cpu";
  if (d.device_type == kDLCUDA) return "cuda:" + std::to_string(d.device_id);
  return "dl" + std::to_string(static_cast<int>(d.device_type)) + ":" +
         std::to_string(d.device_id);
}

inline const char* SupportedName(DLDataType t) {
  if (t.lanes != 1) return nullptr;
  if (t.code == kDLFloat && t.bits == 32) return "float32";
  if (t.code == kDLFloat && t.bits == 16) return "float16";
  if (t.code == kDLBfloat && t.bits == 16) return "bfloat16";
  return nullptr;
}

inline std::string DtypeStr(DLDataType t) {
  if (const char* name = SupportedName(t)) return name;
  if (t.code == kDLBool) return "bool";
  return std::string(ffi::DLDataTypeToString(t));
}

inline bool SameDevice(DLDevice a, DLDevice b) {
  if (IsCpu(a) && IsCpu(b)) return true;
  return a.device_type == b.device_type && a.device_id == b.device_id;
}

// ------------------------------------------------------------------ one tensor argument
struct Arg {
  const char* name = nullptr;
  const DLTensor* t = nullptr;
  uintptr_t ptr = 0;  // data + byte_offset
  int64_t numel = 0;
  int64_t itemsize = 0;
};

inline Arg Describe(const char* name, const DLTensor* t) {
  Arg a;
  a.name = name;
  a.t = t;
  if (t->dtype.lanes != 1) {
    TVM_FFI_THROW(TypeError) << name << ": vector dtypes (lanes=" << t->dtype.lanes
                             << ") are not supported";
  }
  if (t->ndim < 0 || t->ndim > 64) {
    TVM_FFI_THROW(ValueError) << name << ": rank " << t->ndim << " is not a tensor rank";
  }
  int64_t numel = 1;
  for (int i = 0; i < t->ndim; ++i) {
    if (t->shape[i] < 0) {
      TVM_FFI_THROW(ValueError) << name << ": shape " << ShapeStr(t->shape, t->ndim)
                                << " has a negative extent";
    }
  }
  bool overflow = false;
  for (int i = 0; i < t->ndim; ++i) overflow |= __builtin_mul_overflow(numel, t->shape[i], &numel);
  a.itemsize = (t->dtype.bits + 7) / 8;
  int64_t nbytes = 0;
  if (overflow || __builtin_mul_overflow(numel, a.itemsize, &nbytes)) {
    for (int i = 0; i < t->ndim; ++i) {
      if (t->shape[i] == 0) {  // an empty tensor with huge other extents is still empty
        overflow = false;
        numel = 0;
      }
    }
    if (overflow || numel != 0) {
      TVM_FFI_THROW(ValueError) << name << ": shape " << ShapeStr(t->shape, t->ndim)
                                << " is too large (more than 2**63 bytes)";
    }
  }
  a.numel = numel;
  a.ptr = reinterpret_cast<uintptr_t>(t->data) + static_cast<uintptr_t>(t->byte_offset);
  return a;
}

inline void CheckRank(const Arg& a, int rank, const char* layout) {
  if (a.t->ndim != rank) {
    TVM_FFI_THROW(ValueError) << a.name << ": expected a " << rank << "-D tensor " << layout
                              << ", got shape " << ShapeStr(a.t->shape, a.t->ndim);
  }
}

inline void CheckDtypeSupported(const Arg& a) {
  if (SupportedName(a.t->dtype) == nullptr) {
    TVM_FFI_THROW(TypeError) << a.name << ": expected dtype in ['bfloat16', 'float16', "
                             << "'float32'], got " << DtypeStr(a.t->dtype);
  }
}

inline void CheckSameDevice(const Arg& a, const Arg& ref) {
  if (!SameDevice(a.t->device, ref.t->device)) {
    TVM_FFI_THROW(ValueError) << a.name << ": expected the device of " << ref.name << " ("
                              << DeviceStr(ref.t->device) << "), got "
                              << DeviceStr(a.t->device);
  }
}

inline bool IsContiguous(const Arg& a) {
  if (a.t->strides == nullptr || a.numel == 0) return true;
  int64_t expected = 1;
  for (int i = a.t->ndim - 1; i >= 0; --i) {
    if (a.t->shape[i] != 1 && a.t->strides[i] != expected) return false;
    expected *= a.t->shape[i];
  }
  return true;
}

inline void CheckLayout(const Arg& a) {
  if (a.t->strides != nullptr) {
    for (int i = 0; i < a.t->ndim; ++i) {
      if (a.t->strides[i] < 0) {
        TVM_FFI_THROW(ValueError) << a.name << ": expected non-negative strides, got "
                                  << ShapeStr(a.t->strides, a.t->ndim);
      }
    }
  }
  if (!IsContiguous(a)) {
    TVM_FFI_THROW(ValueError) << a.name << ": expected a contiguous tensor, got strides "
                              << ShapeStr(a.t->strides, a.t->ndim) << " for shape "
                              << ShapeStr(a.t->shape, a.t->ndim) << " (call .contiguous() first)";
  }
  if (a.numel && a.itemsize && a.ptr % static_cast<uintptr_t>(a.itemsize)) {
    std::ostringstream os;
    os << std::hex << a.ptr;
    TVM_FFI_THROW(ValueError) << a.name << ": data pointer 0x" << os.str()
                              << " is not aligned to its " << a.itemsize
                              << "-byte element size";
  }
}

inline void CheckOutput(const Arg& a, const int64_t* shape, int ndim, const Arg& ref) {
  bool same = a.t->ndim == ndim;
  for (int i = 0; same && i < ndim; ++i) same = a.t->shape[i] == shape[i];
  if (!same) {
    TVM_FFI_THROW(ValueError) << a.name << ": expected shape " << ShapeStr(shape, ndim)
                              << ", got " << ShapeStr(a.t->shape, a.t->ndim);
  }
  const DLDataType x = a.t->dtype, r = ref.t->dtype;
  if (x.code != r.code || x.bits != r.bits || x.lanes != r.lanes) {
    TVM_FFI_THROW(TypeError) << a.name << ": expected dtype " << DtypeStr(r) << " (that of "
                             << ref.name << "), got " << DtypeStr(x);
  }
  CheckSameDevice(a, ref);
  CheckLayout(a);
}

inline void CheckNoOverlap(const Arg& a, const Arg& b) {
  if (!a.numel || !b.numel || !SameDevice(a.t->device, b.t->device)) return;
  const uintptr_t a_end = a.ptr + static_cast<uintptr_t>(a.numel * a.itemsize);
  const uintptr_t b_end = b.ptr + static_cast<uintptr_t>(b.numel * b.itemsize);
  if (a.ptr < b_end && b.ptr < a_end) {
    TVM_FFI_THROW(ValueError) << a.name << ": expected memory disjoint from " << b.name
                              << ", but they overlap";
  }
}

inline int64_t CheckCount(const char* name, const ffi::AnyView& v, int64_t minimum) {
  if (v.type_index() == ffi::TypeIndex::kTVMFFIInt) {
    const int64_t value = v.cast<int64_t>();
    if (value >= minimum) return value;
    TVM_FFI_THROW(ValueError) << name << ": expected an int >= " << minimum << ", got "
                              << value;
  }
  std::string got;
  if (v.type_index() == ffi::TypeIndex::kTVMFFIBool) {
    got = v.cast<bool>() ? "True" : "False";
  } else if (v.type_index() == ffi::TypeIndex::kTVMFFIFloat) {
    std::ostringstream os;  // as Python's repr: 4.0, not 4
    os.precision(17);
    os << v.cast<double>();
    got = os.str();
    if (got.find_first_of(".eEni") == std::string::npos) got += ".0";
  } else if (auto text = v.try_cast<ffi::String>()) {
    got = "'" + std::string(*text) + "'";  // as Python's repr
  } else if (v.type_index() == ffi::TypeIndex::kTVMFFINone) {
    got = "None";
  } else {
    got = "a " + std::string(v.GetTypeKey());
  }
  TVM_FFI_THROW(ValueError) << name << ": expected an int >= " << minimum << ", got " << got;
}

// A tensor argument that may be None.
inline const DLTensor* OptionalTensor(const char* name, const ffi::AnyView& v) {
  if (v.type_index() == ffi::TypeIndex::kTVMFFINone) return nullptr;
  if (auto t = v.try_cast<DLTensor*>()) return *t;
  TVM_FFI_THROW(TypeError) << name << ": expected a tensor or None, got " << v.GetTypeKey();
}

// ------------------------------------------------------------------ call geometry
struct Dims {
  int64_t batch = 0, num_heads = 0, key_dim = 0, n = 0, height = 0, width = 0;
  int64_t merged_numel = 0;
  int64_t half[3] = {0, 0, 0};
  int64_t merged[4] = {0, 0, 0, 0};
  int merged_ndim = 4;
};

inline void FinishDims(Dims* d) {
  d->half[0] = d->batch * d->num_heads;
  d->half[1] = d->n;
  d->half[2] = d->key_dim;
  d->merged[0] = d->batch;
  d->merged[1] = 2 * d->num_heads * d->key_dim;
  if (d->merged_ndim == 4) {
    d->merged[2] = d->height;
    d->merged[3] = d->width;
  } else {
    d->merged[2] = d->n;
  }
  d->merged_numel = d->half[0] * d->n * d->key_dim * 2;
}

// check_forward_inputs of psa_tvm/validation.py, in the same order.
inline Dims CheckForwardInputs(const Arg& lo, const Arg& hi, int64_t num_heads, int64_t height,
                               int64_t width) {
  const char* layout = "[B*num_heads, H*W, key_dim]";
  CheckRank(lo, 3, layout);
  CheckRank(hi, 3, layout);
  const int64_t* ls = lo.t->shape;
  const int64_t* hs = hi.t->shape;
  if (ls[0] != hs[0] || ls[1] != hs[1] || ls[2] != hs[2]) {
    TVM_FFI_THROW(ValueError) << "hi: expected the shape of lo " << ShapeStr(ls, 3) << ", got "
                              << ShapeStr(hs, 3);
  }
  const DLDataType a = lo.t->dtype, b = hi.t->dtype;
  if (a.code != b.code || a.bits != b.bits) {
    TVM_FFI_THROW(TypeError) << "hi: expected the dtype of lo (" << DtypeStr(a) << "), got "
                             << DtypeStr(b);
  }
  CheckDtypeSupported(lo);
  CheckSameDevice(hi, lo);
  if (ls[0] % num_heads) {
    TVM_FFI_THROW(ValueError) << "lo: expected dim 0 (B*num_heads) divisible by num_heads="
                              << num_heads << ", got " << ls[0];
  }
  int64_t hw = 0;
  if (__builtin_mul_overflow(height, width, &hw) || ls[1] != hw) {
    TVM_FFI_THROW(ValueError) << "lo: expected dim 1 == H*W = " << height << "*" << width
                              << " = " << I128Str(static_cast<__int128>(height) * width) << ", got "
                              << ls[1];
  }
  if (ls[2] < 1) {
    TVM_FFI_THROW(ValueError) << "lo: expected dim 2 (key_dim) >= 1, got " << ls[2];
  }
  int64_t twice = 0, channels = 0;
  if (__builtin_mul_overflow(num_heads, int64_t{2}, &twice) ||
      __builtin_mul_overflow(twice, ls[2], &channels)) {
    TVM_FFI_THROW(ValueError) << "num_heads: 2*num_heads*key_dim = 2*" << num_heads << "*"
                              << ls[2] << " is too large";
  }
  CheckLayout(lo);
  CheckLayout(hi);
  Dims d;
  d.batch = ls[0] / num_heads;
  d.num_heads = num_heads;
  d.key_dim = ls[2];
  d.n = ls[1];
  d.height = height;
  d.width = width;
  FinishDims(&d);
  return d;
}

inline void CheckForwardOutput(const Arg& out, const Arg& lo, const Arg& hi, const Dims& d) {
  CheckOutput(out, d.merged, d.merged_ndim, lo);
  CheckNoOverlap(out, lo);
  CheckNoOverlap(out, hi);
}

// check_backward_input of psa_tvm/validation.py.
inline Dims CheckBackwardInput(const Arg& g, int64_t num_heads, int64_t key_dim) {
  if (g.t->ndim != 3 && g.t->ndim != 4) {
    TVM_FFI_THROW(ValueError) << "d_merged: expected a 4-D tensor [B, c, H, W], got shape "
                              << ShapeStr(g.t->shape, g.t->ndim);
  }
  int64_t channels = 0, twice = 0;
  if (__builtin_mul_overflow(num_heads, int64_t{2}, &twice) ||
      __builtin_mul_overflow(twice, key_dim, &channels) || g.t->shape[1] != channels) {
    TVM_FFI_THROW(ValueError) << "d_merged: expected dim 1 == 2*num_heads*key_dim = "
                              << I128Str(static_cast<__int128>(2) * num_heads * key_dim) << ", got "
                              << g.t->shape[1];
  }
  CheckDtypeSupported(g);
  CheckLayout(g);
  Dims d;
  d.batch = g.t->shape[0];
  d.num_heads = num_heads;
  d.key_dim = key_dim;
  if (g.t->ndim == 4) {
    d.height = g.t->shape[2];
    d.width = g.t->shape[3];
    if (__builtin_mul_overflow(d.height, d.width, &d.n)) {  // only possible when B == 0
      TVM_FFI_THROW(ValueError) << "d_merged: H*W of shape " << ShapeStr(g.t->shape, 4)
                                << " is too large";
    }
  } else {
    d.merged_ndim = 3;
    d.n = g.t->shape[2];
  }
  FinishDims(&d);
  return d;
}

// ------------------------------------------------------------------ tables
inline const Config* FindConfig(const Dims& d, DLDataType dtype, bool required) {
  for (int i = 0; i < kNumConfigs; ++i) {
    const Config& c = kConfigs[i];
    if (c.key_dim == d.key_dim && c.num_heads == d.num_heads && c.dtype_code == dtype.code &&
        c.dtype_bits == dtype.bits) {
      return &c;
    }
  }
  if (!required) return nullptr;
  PSA_THROW_MISSING << "this psa-tvm native library has no build for key_dim=" << d.key_dim
                    << ", num_heads=" << d.num_heads << ", dtype " << DtypeStr(dtype)
                    << "; run `psa-tvm build --key-dim " << d.key_dim << " --num-heads "
                    << d.num_heads << " --dtype " << DtypeStr(dtype) << "` into its directory";
}

inline const Build& BuildFor(const Config& c, int pass, int arch) {
  int index = c.default_build[pass];
  for (int i = 0; i < c.num_arch_choices; ++i) {
    if (c.arch_choices[i].arch == arch) index = c.arch_choices[i].build[pass];
  }
  if (index < 0) {
    PSA_THROW_MISSING << "this psa-tvm native library has no "
                      << (pass == kForward ? "forward" : "backward") << " build for key_dim="
                      << c.key_dim << ", num_heads=" << c.num_heads << ", dtype "
                      << c.dtype_name;
  }
  return kBuilds[index];
}

// binary_for of psa_tvm/runtime/manifest.py: SASS of the same major, no newer minor; else PTX.
inline int BinaryFor(const Build& b, int arch) {
  for (int i = 0; i < b.num_binaries; ++i) {
    for (int j = 0; j < b.binaries[i].num_sass; ++j) {
      const int s = b.binaries[i].sass[j];
      if (s / 10 == arch / 10 && s <= arch) return i;
    }
  }
  for (int i = 0; i < b.num_binaries; ++i) {
    for (int j = 0; j < b.binaries[i].num_ptx; ++j) {
      if (b.binaries[i].ptx[j] <= arch) return i;
    }
  }
  PSA_THROW_MISSING << b.source << " was built without code for sm_" << arch
                    << ": rebuild with --arch sm_" << arch;
}

// ------------------------------------------------------------------ planning
struct Plan {
  const Build* build = nullptr;
  const Kernel* kernel = nullptr;
  int64_t symbols[kMaxSymbols] = {};
  int64_t grid[3] = {1, 1, 1};
  int64_t block[3] = {1, 1, 1};
};

// The pointers' common alignment, as a power of two of at most kMaxAlignment bytes (the
// widest access any kernel makes), exactly as psa_tvm/runtime/plan.py computes it.
inline uintptr_t CommonAlignment(const uintptr_t* ptrs, const bool* present, int count) {
  uintptr_t combined = kMaxAlignment;
  for (int i = 0; i < count; ++i) combined |= (present == nullptr || present[i]) ? ptrs[i] : 0;
  return combined & (~combined + 1);
}

// runtime/plan.py's choose_kernel: among the build's kernels of the pass and index dtype
// (int32 while `numel` plus a tail tile's overrun fits), those whose `vec` divides N, whose
// widest access the alignment allows, whose size range (`min_numel`, and `max_numel` where
// set) holds the call and whose N range holds N; the widest (vec_kd, rank, has an N range,
// min_numel) wins (the table is sorted so).
inline Plan ChooseKernel(const Build& build, int pass, int64_t n, int64_t numel,
                         uintptr_t alignment, int64_t itemsize) {
  const int index64 = numel + kInt32Margin <= kInt32Max ? 0 : 1;
  Plan plan;
  plan.build = &build;
  for (int i = 0; i < build.num_kernels && plan.kernel == nullptr; ++i) {
    const Kernel& k = build.kernels[i];
    if (k.pass != pass || k.index64 != index64 || n % k.vec || numel < k.min_numel) continue;
    if (k.max_numel > 0 && numel > k.max_numel) continue;
    if (k.max_n > 0 && (n < k.min_n || n > k.max_n)) continue;
    const uintptr_t need = static_cast<uintptr_t>((k.vec > k.vec_kd ? k.vec : k.vec_kd) *
                                                  itemsize);
    if (alignment % need == 0) plan.kernel = &k;
  }
  if (plan.kernel == nullptr) {
    PSA_THROW_MISSING << build.source << ": no " << (pass == kForward ? "forward" : "backward")
                      << " kernel (" << (index64 ? "int64" : "int32") << ") fits N=" << n
                      << " and the data pointers' alignment";
  }
  return plan;
}

// Grid and block of a plan whose symbols are set, checked against CUDA's limits; `schedule`
// (may be null) is named in the grid error as the Python path of the same op names it.
inline void SetLaunchDims(Plan* plan, int64_t batch, int64_t n, const char* schedule) {
  __int128 dims[6];
  plan->kernel->dims(plan->symbols, dims);
  for (int axis = 0; axis < 3; ++axis) {
    if (dims[axis] > kGridLimits[axis] || dims[axis] < 0) {
      const std::string named = schedule ? std::string(" for schedule '") + schedule + "'" : "";
      TVM_FFI_THROW(ValueError) << "shape: B=" << batch << ", N=" << n << " needs grid["
                                << axis << "]=" << I128Str(dims[axis])
                                << ", past the CUDA limit " << kGridLimits[axis] << named;
    }
    if (dims[3 + axis] > kBlockLimit || dims[3 + axis] < 0) {
      TVM_FFI_THROW(RuntimeError) << plan->build->source << ": block[" << axis << "] = "
                                  << I128Str(dims[3 + axis])
                                  << " is not a valid CUDA block size";
    }
    plan->grid[axis] = static_cast<int64_t>(dims[axis]);
    plan->block[axis] = static_cast<int64_t>(dims[3 + axis]);
  }
}

// `ptrs[role]` / `present[role]`: the call's tensors (those not passed are not checked).
inline Plan MakePlan(const Build& build, int pass, const Dims& d, int64_t itemsize,
                     const uintptr_t* ptrs, const bool* present) {
  Plan plan = ChooseKernel(build, pass, d.n, d.merged_numel,
                           CommonAlignment(ptrs, present, kNumRoles), itemsize);
  const Kernel& k = *plan.kernel;
  // The kernels' view of the tensors: [B*nh, N, kd] and [B, nh, 2, kd, N].
  const int64_t half[3] = {d.batch * d.num_heads, d.n, d.key_dim};
  const int64_t merged5[5] = {d.batch, d.num_heads, 2, d.key_dim, d.n};
  for (int s = 0; s < k.num_symbols; ++s) {
    const Symbol& sym = k.symbols[s];
    const bool is5 = sym.role == kOut || sym.role == kG;
    plan.symbols[s] = (is5 ? merged5 : half)[sym.axis] / sym.divisor;
  }
  SetLaunchDims(&plan, d.batch, d.n, build.schedule);
  return plan;
}

inline int ParseArch(const ffi::String& arch) {
  std::string s(arch);
  if (s.rfind("sm_", 0) == 0) s = s.substr(3);
  while (!s.empty() && !isdigit(static_cast<unsigned char>(s.back()))) s.pop_back();
  char* end = nullptr;
  const long value = s.empty() ? -1 : std::strtol(s.c_str(), &end, 10);
  if (value <= 0 || (end && *end)) {
    TVM_FFI_THROW(ValueError) << "arch: expected a CUDA architecture such as 'sm_90', got '"
                              << std::string(arch) << "'";
  }
  return static_cast<int>(value);
}

// ------------------------------------------------------------------ CUDA
#if PSA_NATIVE_CUDA
#define PSA_CUDA_CHECK(stmt, what)                                                      \
  do {                                                                                  \
    cudaError_t psa_err_ = (stmt);                                                      \
    if (psa_err_ != cudaSuccess) {                                                      \
      TVM_FFI_THROW(RuntimeError) << what << ": " << cudaGetErrorName(psa_err_) << " (" \
                                  << cudaGetErrorString(psa_err_) << ")";               \
    }                                                                                   \
  } while (0)

constexpr int kMaxDevices = 256;

inline int DeviceArch(int device) {
  static std::atomic<int> cache[kMaxDevices];
  if (device < 0 || device >= kMaxDevices) {
    TVM_FFI_THROW(ValueError) << "device: cuda:" << device << " is out of range";
  }
  int arch = cache[device].load(std::memory_order_relaxed);
  if (arch) return arch;
  int major = 0, minor = 0;
  PSA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                 "cuda:" << device << ": reading the compute capability");
  PSA_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
                 "cuda:" << device << ": reading the compute capability");
  arch = major * 10 + minor;
  cache[device].store(arch, std::memory_order_relaxed);
  return arch;
}

// A fatbin loaded with cudaLibraryLoadData (context-independent: every device, every thread);
// never unloaded, so no unload runs after the driver has shut down at exit.
struct LoadedBinary {
  std::once_flag once;
  cudaLibrary_t library = nullptr;
  std::vector<cudaKernel_t> kernels;
  // Per kernel, a bit per device (0-63) that has opted the kernel in to its dynamic shared
  // memory past 48 KB; zeroed by the value-initialising new.
  std::unique_ptr<std::atomic<uint64_t>[]> opted_in;
};

// Dynamic shared memory a kernel may take without opting in (CUDA's default limit).
constexpr uint32_t kDefaultDynamicSmemBytes = 48 * 1024;

inline LoadedBinary* Loaded(int build, int binary) {
  static std::vector<LoadedBinary*>* slots = [] {
    auto* v = new std::vector<LoadedBinary*>();
    for (int b = 0; b < kNumBuilds; ++b) {
      for (int i = 0; i < kBuilds[b].num_binaries; ++i) v->push_back(new LoadedBinary());
    }
    return v;
  }();
  int offset = 0;
  for (int b = 0; b < build; ++b) offset += kBuilds[b].num_binaries;
  return (*slots)[offset + binary];
}

inline cudaKernel_t KernelHandle(const Plan& plan, int device, int arch) {
  const int build = static_cast<int>(plan.build - kBuilds);
  const int binary = BinaryFor(*plan.build, arch);
  LoadedBinary* slot = Loaded(build, binary);
  std::call_once(slot->once, [&] {
    const Binary& bin = plan.build->binaries[binary];
    cudaLibrary_t library = nullptr;
    PSA_CUDA_CHECK(cudaLibraryLoadData(&library, bin.data, nullptr, nullptr, 0, nullptr,
                                       nullptr, 0),
                   plan.build->source << ": loading its fatbin");
    std::vector<cudaKernel_t> kernels(plan.build->num_kernels);
    for (int i = 0; i < plan.build->num_kernels; ++i) {
      PSA_CUDA_CHECK(cudaLibraryGetKernel(&kernels[i], library, plan.build->kernels[i].entry),
                     plan.build->source << ": kernel " << plan.build->kernels[i].entry);
    }
    slot->opted_in.reset(new std::atomic<uint64_t>[kernels.size()]());
    slot->kernels = std::move(kernels);
    slot->library = library;
  });
  const auto index = plan.kernel - plan.build->kernels;
  cudaKernel_t kernel = slot->kernels[index];
  const uint32_t smem = plan.kernel->dynamic_smem_bytes;
  if (smem > kDefaultDynamicSmemBytes) {
    // CUDA asks a kernel to opt in to more than 48 KB of dynamic shared memory, per device;
    // once per device here (devices past 63 opt in at every launch).
    const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
    if (!bit || !(slot->opted_in[index].load(std::memory_order_acquire) & bit)) {
      PSA_CUDA_CHECK(cudaKernelSetAttributeForDevice(
                         kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(smem), device),
                     plan.build->source << ": kernel " << plan.kernel->entry << ": opting in to "
                                        << smem << " bytes of dynamic shared memory");
      slot->opted_in[index].fetch_or(bit, std::memory_order_release);
    }
  }
  return kernel;
}

// Makes `device` current for the scope (our cudart is private; the driver context is shared).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    PSA_CUDA_CHECK(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) PSA_CUDA_CHECK(cudaSetDevice(device), "cudaSetDevice");
    else previous_ = -1;
  }
  ~DeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

inline void LaunchCuda(const Plan& plan, int device, int arch, const uintptr_t* ptrs) {
  const Kernel& k = *plan.kernel;
  cudaKernel_t handle = KernelHandle(plan, device, arch);
  void* ptr_values[kMaxParams];
  int32_t i32_values[kMaxParams];
  int64_t i64_values[kMaxParams];
  void* args[kMaxParams];
  for (int i = 0; i < k.num_params; ++i) {
    const Param& p = k.params[i];
    if (p.kind == kPtr) {
      ptr_values[i] = reinterpret_cast<void*>(ptrs[p.index]);
      args[i] = &ptr_values[i];
    } else if (p.kind == kI32) {
      i32_values[i] = static_cast<int32_t>(plan.symbols[p.index]);
      args[i] = &i32_values[i];
    } else {
      i64_values[i] = plan.symbols[p.index];
      args[i] = &i64_values[i];
    }
  }
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, device));
  const dim3 grid(static_cast<unsigned>(plan.grid[0]), static_cast<unsigned>(plan.grid[1]),
                  static_cast<unsigned>(plan.grid[2]));
  const dim3 block(static_cast<unsigned>(plan.block[0]), static_cast<unsigned>(plan.block[1]),
                   static_cast<unsigned>(plan.block[2]));
  PSA_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(handle), grid, block, args,
                                  k.dynamic_smem_bytes, stream),
                 "launching " << k.entry);
}

struct CudaAlloc {
  void AllocData(DLTensor* t) {
    void* p = nullptr;
    const size_t size = ffi::GetDataSize(*t);
    DeviceScope scope(t->device.device_id);
    PSA_CUDA_CHECK(cudaMalloc(&p, size ? size : 1), "cudaMalloc");
    t->data = p;
  }
  void FreeData(DLTensor* t) {
    if (t->data) cudaFree(t->data);
  }
};
#endif  // PSA_NATIVE_CUDA

struct CpuAlloc {
  void AllocData(DLTensor* t) {
    const size_t size = (ffi::GetDataSize(*t) + 63) / 64 * 64;
    t->data = std::aligned_alloc(64, size ? size : 64);
    if (t->data == nullptr) TVM_FFI_THROW(MemoryError) << "out of memory";
  }
  void FreeData(DLTensor* t) { std::free(t->data); }
};

inline ffi::Tensor Allocate(const int64_t* shape, int ndim, DLDataType dtype, DLDevice device) {
  ffi::ShapeView view(shape, ndim);
  if (TVMFFIEnvGetDLPackManagedTensorAllocator() != nullptr) {  // the caller's (torch's)
    return ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, view, dtype, device);
  }
  if (IsCpu(device)) return ffi::Tensor::FromNDAlloc(CpuAlloc(), view, dtype, device);
#if PSA_NATIVE_CUDA
  if (device.device_type == kDLCUDA) {
    return ffi::Tensor::FromNDAlloc(CudaAlloc(), view, dtype, device);
  }
#endif
  TVM_FFI_THROW(ValueError) << "cannot allocate on " << DeviceStr(device);
}

// ------------------------------------------------------------------ CPU
#if PSA_NATIVE_CPU_POOL
}  // namespace psa_native
// cpu_pool.cc, linked in: puts its pool behind __TVMBackendParallelLaunch (the kernels'
// parallel loops call through it). Its constructor does so at load unless a TVM runtime already
// did; where TVM is imported its loader fills the pointer with TVM's pool after loading (half
// the cores by default), so the first CPU call switches to ours, as psa_tvm.runtime.cpu does.
extern "C" int __tvm_ffi_psa_tvm_own_pool(void*, const void*, int32_t, void*);
extern "C" int psa_tvm_pool_serial(int on);
extern "C" int64_t psa_tvm_cpu_prefetch_bytes();
extern "C" int psa_tvm_cpu_lines();
namespace psa_native {
// 1: forwards take the aligned-line kernel; 0: not; -1 / -2: PSA_TVM_CPU_LINES is
// malformed / asks for it on a CPU without AVX-512BW/VL (ChooseCpu throws). cpu_pool.cc.
inline int CpuLines() { return psa_tvm_cpu_lines(); }
// Calls whose merged tensor reaches this many bytes take the prefetching kernels (cpu_pool.cc
// decides for both launch paths; 0: never; -1: the variable is malformed, ChooseCpu throws).
inline int64_t CpuPrefetchBytes() { return psa_tvm_cpu_prefetch_bytes(); }
inline void UseOwnPool() {
  static std::once_flag once;
  std::call_once(once, [] { __tvm_ffi_psa_tvm_own_pool(nullptr, nullptr, 0, nullptr); });
}
// Calls moving at most this many bytes (both sides) run on the calling thread: waking the
// pool's workers costs more than the work (B=1, nh=4, kd=32, 2x2 float32: measured 1.1 us
// inline vs 4-100 us through the pool on this 2-core host, depending on its load).
constexpr int64_t kSerialBytes = 64 << 10;
class SerialScope {
 public:
  explicit SerialScope(bool on) : previous_(on ? psa_tvm_pool_serial(1) : -1) {}
  ~SerialScope() {
    if (previous_ >= 0) psa_tvm_pool_serial(previous_);
  }
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;

 private:
  int previous_;
};
#else
inline void UseOwnPool() {}
inline int64_t CpuPrefetchBytes() { return 0; }
inline int CpuLines() { return 0; }
constexpr int64_t kSerialBytes = 0;
struct SerialScope {
  explicit SerialScope(bool) {}
};
#endif

// The CPU kernel for a validated call: psa_tvm.runtime.cpu.forward_choice / backward_choice.
// "pairs" (16-bit on int32 words) needs every data pointer 4-byte aligned (the int32 views of
// the run time: same data, last dim halved) and N a multiple of 2 * pairs_forward_vec (forward)
// or even (backward); else "vec" (forward, N % forward_vec == 0); else "prefetch" (the
// generic kernel prefetching each slice first: built, and the merged tensor reaches
// CpuPrefetchBytes() > 0); else "lines" (forward: built, CpuLines() == 1, N >= 64, rows that
// are not whole 64-byte lines and, float32, a merged tensor of at most 8 MiB:
// psa_tvm.runtime.cpu.takes_lines); else "generic".
struct CpuChoice {
  const CpuKernel* kernel = nullptr;
  const char* kind = "generic";
  bool words = false;  // int32 views
  int64_t arg = 0;     // the kernel's last argument
};

inline const CpuSet& CpuKernelsOf(const Config& c) {
  if (c.cpu == nullptr) {
    PSA_THROW_MISSING << "this psa-tvm native library has no CPU kernels for key_dim="
                      << c.key_dim << ", num_heads=" << c.num_heads << ", dtype "
                      << c.dtype_name;
  }
  return *c.cpu;
}

// psa_tvm.runtime.cpu.takes_lines (tests/test_native.py checks that both paths plan alike):
// N >= kLinesMinN, rows that are not whole 64-byte lines, and for float32 a merged tensor of at
// most kLinesFloat32MaxBytes. The generator writes both constants from the Python run time's
// (compiler/native.py, _run_time_constants), so the two paths share their values.
inline bool TakesLines(const Config& c, const Dims& d) {
  const int64_t line = 512 / c.dtype_bits;  // elements of a 64-byte line
  return d.n >= kLinesMinN && d.n % line != 0 &&
         (c.dtype_bits == 16 || d.merged_numel * (c.dtype_bits / 8) <= kLinesFloat32MaxBytes);
}

inline CpuChoice ChooseCpu(const Config& c, int pass, const Dims& d, const uintptr_t* ptrs) {
  const CpuSet& s = CpuKernelsOf(c);
  const int roles[2][3] = {{kLo, kHi, kOut}, {kG, kDlo, kDhi}};
  const int64_t threshold = CpuPrefetchBytes();
  if (threshold < 0) {  // cpu_pool.cc: the variable is set and not a whole number of bytes
    const char* value = std::getenv("PSA_TVM_CPU_PREFETCH_BYTES");
    TVM_FFI_THROW(ValueError) << "PSA_TVM_CPU_PREFETCH_BYTES='" << (value ? value : "")
                              << "': expected a whole number of bytes (digits only, e.g. "
                                 "8388608; 0: never prefetch), or unset for a quarter of the L3";
  }
  const bool prefetch = threshold > 0 && d.merged_numel * (c.dtype_bits / 8) >= threshold;
  const int lines = CpuLines();
  if (lines < 0) {  // cpu_pool.cc: malformed, or 1 on a CPU without the instructions
    const char* value = std::getenv("PSA_TVM_CPU_LINES");
    if (lines == -2) {
      TVM_FFI_THROW(ValueError) << "PSA_TVM_CPU_LINES='" << (value ? value : "")
                                << "': this CPU lacks AVX-512BW/VL, which the aligned-line "
                                   "kernel needs; use auto or 0";
    }
    TVM_FFI_THROW(ValueError) << "PSA_TVM_CPU_LINES='" << (value ? value : "")
                              << "': expected auto (default), 0 or 1";
  }
  bool aligned = d.key_dim % 2 == 0;
  for (int r : roles[pass]) aligned = aligned && ptrs[r] % 4 == 0;
  CpuChoice ch;
  if (pass == kForward) {
    const int64_t pairs = 2 * static_cast<int64_t>(s.pairs_forward_vec);
    if (s.pairs_forward.fn != nullptr && pairs > 0 && d.n % pairs == 0 && aligned) {
      ch.kernel = &s.pairs_forward, ch.kind = "pairs", ch.words = true, ch.arg = d.n / pairs;
    } else if (s.forward_vec_kernel.fn != nullptr && s.forward_vec > 1 &&
               d.n % s.forward_vec == 0) {
      ch.kernel = &s.forward_vec_kernel, ch.kind = "vec", ch.arg = d.n / s.forward_vec;
    } else if (prefetch && s.forward_prefetch.fn != nullptr) {
      ch.kernel = &s.forward_prefetch, ch.kind = "prefetch", ch.arg = d.n;
    } else if (lines == 1 && s.forward_lines.fn != nullptr && TakesLines(c, d)) {
      ch.kernel = &s.forward_lines, ch.kind = "lines", ch.arg = d.n;
    } else {
      ch.kernel = &s.forward, ch.arg = d.n;
    }
  } else {
    if (s.pairs_backward_ok && s.pairs_backward.fn != nullptr && d.n % 2 == 0 && aligned) {
      ch.kernel = &s.pairs_backward, ch.kind = "pairs", ch.words = true, ch.arg = d.n / 2;
    } else if (prefetch && s.backward_prefetch.fn != nullptr) {
      ch.kernel = &s.backward_prefetch, ch.kind = "prefetch", ch.arg = d.n;
    } else {
      ch.kernel = &s.backward, ch.arg = d.n;
    }
  }
  return ch;
}

inline void RunCpu(const Config& c, int pass, const Dims& d, const uintptr_t* ptrs) {
  const CpuChoice ch = ChooseCpu(c, pass, d, ptrs);
  // The kernels' views: [B*nh, N, kd] and [B, nh, 2, kd, N]; as int32 words the last dims
  // are halved (kd / 2 and N / 2), the data the same.
  const int64_t w = ch.words ? 2 : 1;
  int64_t half[3] = {d.batch * d.num_heads, d.n, d.key_dim / w};
  int64_t merged5[5] = {d.batch, d.num_heads, 2, d.key_dim, d.n / w};
  const DLDataType dtype = ch.words ? DLDataType{kDLInt, 32, 1}
                                    : DLDataType{c.dtype_code, c.dtype_bits, 1};
  auto make = [&](uintptr_t p, int64_t* shape, int ndim) {
    DLTensor t{};
    t.data = reinterpret_cast<void*>(p);
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = ndim;
    t.dtype = dtype;
    t.shape = shape;
    return t;
  };
  DLTensor ts[3];
  if (pass == kForward) {
    ts[0] = make(ptrs[kLo], half, 3);
    ts[1] = make(ptrs[kHi], half, 3);
    ts[2] = make(ptrs[kOut], merged5, 5);
  } else {
    ts[0] = make(ptrs[kG], merged5, 5);
    ts[1] = make(ptrs[kDlo], half, 3);
    ts[2] = make(ptrs[kDhi], half, 3);
  }
  TVMFFIAny args[4];
  for (int i = 0; i < 3; ++i) {
    args[i].type_index = ffi::TypeIndex::kTVMFFIDLTensorPtr;
    args[i].zero_padding = 0;
    args[i].v_ptr = &ts[i];
  }
  args[3].type_index = ffi::TypeIndex::kTVMFFIInt;
  args[3].zero_padding = 0;
  args[3].v_int64 = ch.arg;
  TVMFFIAny result;
  result.type_index = ffi::TypeIndex::kTVMFFINone;
  result.zero_padding = 0;
  result.v_int64 = 0;
  UseOwnPool();
  const int64_t bytes = 2 * d.merged_numel * (c.dtype_bits / 8);  // read + written
  SerialScope serial(bytes <= kSerialBytes);
  TVM_FFI_CHECK_SAFE_CALL(ch.kernel->fn(nullptr, args, 4, &result));
}

// ------------------------------------------------------------------ one validated call
inline void Run(int pass, const Dims& d, const Arg& first, const uintptr_t* ptrs,
                const bool* present) {
  if (d.merged_numel == 0) return;  // nothing to move; an empty grid is no valid launch
  const DLDevice dev = first.t->device;
  const Config* c = FindConfig(d, first.t->dtype, true);
  if (IsCpu(dev)) {
    RunCpu(*c, pass, d, ptrs);
    return;
  }
#if PSA_NATIVE_CUDA
  if (dev.device_type == kDLCUDA) {
    const int arch = DeviceArch(dev.device_id);
    const Plan plan = MakePlan(BuildFor(*c, pass, arch), pass, d, first.itemsize, ptrs, present);
    DeviceScope scope(dev.device_id);
    LaunchCuda(plan, dev.device_id, arch, ptrs);
    return;
  }
#else
  if (dev.device_type == kDLCUDA) {  // the caller may run it another way (psa_tvm falls back)
    PSA_THROW_MISSING << "this psa-tvm native library was built without CUDA (no CUDA toolkit "
                      << "where `psa-tvm build` ran)";
  }
#endif
  TVM_FFI_THROW(ValueError) << first.name << ": expected a CPU or CUDA tensor, got device "
                            << DeviceStr(dev);
}

// ------------------------------------------------------------------ exported functions
// merge_forward(lo, hi, out): num_heads and H, W follow from out [B, 2*nh*kd, H, W] (or
// [B, 2*nh*kd, N]).
inline void MergeForward(DLTensor* lo_v, DLTensor* hi_v, DLTensor* out_v) {
  const Arg lo = Describe("lo", lo_v), hi = Describe("hi", hi_v);
  const Arg out = Describe("out", out_v);
  CheckRank(lo, 3, "[B*num_heads, H*W, key_dim]");
  if (out.t->ndim != 4 && out.t->ndim != 3) {
    TVM_FFI_THROW(ValueError) << "out: expected a 4-D tensor [B, 2*num_heads*key_dim, H, W], "
                              << "got shape " << ShapeStr(out.t->shape, out.t->ndim);
  }
  const int64_t kd = lo.t->shape[2];
  const int64_t c = out.t->shape[1];
  if (kd < 1 || kd > kMaxKeyDim || c % (2 * kd) || c == 0) {
    TVM_FFI_THROW(ValueError) << "out: expected dim 1 == 2*num_heads*key_dim, a positive "
                              << "multiple of 2*" << kd << ", got " << c;
  }
  const int64_t height = out.t->shape[2], width = out.t->ndim == 4 ? out.t->shape[3] : 1;
  Dims d = CheckForwardInputs(lo, hi, c / (2 * kd), height, width);
  if (out.t->ndim == 3) {
    d.merged_ndim = 3;
    FinishDims(&d);
  }
  CheckForwardOutput(out, lo, hi, d);
  const uintptr_t ptrs[kNumRoles] = {lo.ptr, hi.ptr, out.ptr, 0, 0, 0};
  const bool present[kNumRoles] = {true, true, true, false, false, false};
  Run(kForward, d, lo, ptrs, present);
}

// merge(lo, hi, num_heads, H, W, out=None) -> the allocated output, or None when out is given.
inline ffi::Any Merge(DLTensor* lo_v, DLTensor* hi_v, ffi::AnyView num_heads_v,
                      ffi::AnyView height_v, ffi::AnyView width_v, ffi::AnyView out_any) {
  const int64_t num_heads = CheckCount("num_heads", num_heads_v, 1);
  const int64_t height = CheckCount("H", height_v, 0);
  const int64_t width = CheckCount("W", width_v, 0);
  const Arg lo = Describe("lo", lo_v), hi = Describe("hi", hi_v);
  const DLTensor* out_t = OptionalTensor("out", out_any);
  Arg out;
  if (out_t) out = Describe("out", out_t);
  const Dims d = CheckForwardInputs(lo, hi, num_heads, height, width);
  ffi::Any result;
  ffi::Tensor fresh;
  if (out_t) {
    CheckForwardOutput(out, lo, hi, d);
  } else {
    if (d.merged_numel) FindConfig(d, lo.t->dtype, true);  // refuse before allocating
    fresh = Allocate(d.merged, d.merged_ndim, lo.t->dtype, lo.t->device);
    out = Describe("out", fresh.GetDLTensorPtr());
  }
  const uintptr_t ptrs[kNumRoles] = {lo.ptr, hi.ptr, out.ptr, 0, 0, 0};
  const bool present[kNumRoles] = {true, true, true, false, false, false};
  Run(kForward, d, lo, ptrs, present);
  if (!out_t) result = fresh;
  return result;
}

inline ffi::Tensor MergeForwardAlloc(DLTensor* lo, DLTensor* hi,
                                     ffi::AnyView num_heads, ffi::AnyView height,
                                     ffi::AnyView width) {
  return Merge(lo, hi, num_heads, height, width, ffi::AnyView()).cast<ffi::Tensor>();
}

// The backward pass with (d_lo, d_hi) given or allocated; returns [d_lo, d_hi] with None for
// the given ones, or None when both are given.
inline ffi::Any BackwardImpl(const Arg& g, const Dims& d, const DLTensor* dlo_t,
                             const DLTensor* dhi_t) {
  Arg outs[2];
  ffi::Tensor fresh[2];
  const DLTensor* given[2] = {dlo_t, dhi_t};
  const char* names[2] = {"d_lo", "d_hi"};
  for (int i = 0; i < 2; ++i) {
    if (given[i]) {
      outs[i] = Describe(names[i], given[i]);
      CheckOutput(outs[i], d.half, 3, g);
      CheckNoOverlap(outs[i], g);
    }
  }
  if (dlo_t || dhi_t) {
    if (dlo_t && dhi_t) CheckNoOverlap(outs[1], outs[0]);
  }
  if (!dlo_t || !dhi_t) {
    if (d.merged_numel) FindConfig(d, g.t->dtype, true);
    for (int i = 0; i < 2; ++i) {
      if (!given[i]) {
        fresh[i] = Allocate(d.half, 3, g.t->dtype, g.t->device);
        outs[i] = Describe(names[i], fresh[i].GetDLTensorPtr());
      }
    }
  }
  const uintptr_t ptrs[kNumRoles] = {0, 0, 0, g.ptr, outs[0].ptr, outs[1].ptr};
  const bool present[kNumRoles] = {false, false, false, true, true, true};
  Run(kBackward, d, g, ptrs, present);
  if (dlo_t && dhi_t) return ffi::Any();
  ffi::Array<ffi::Any> result;
  for (int i = 0; i < 2; ++i) {
    if (given[i]) result.push_back(ffi::Any());
    else result.push_back(fresh[i]);
  }
  return result;
}

// merge_backward(d_merged, d_lo, d_hi): num_heads and key_dim follow from d_lo.
inline void MergeBackward(DLTensor* g_v, DLTensor* dlo_v, DLTensor* dhi_v) {
  const Arg g = Describe("d_merged", g_v);
  const Arg dlo = Describe("d_lo", dlo_v);
  Describe("d_hi", dhi_v);
  if (g.t->ndim != 3 && g.t->ndim != 4) {
    TVM_FFI_THROW(ValueError) << "d_merged: expected a 4-D tensor [B, c, H, W], got shape "
                              << ShapeStr(g.t->shape, g.t->ndim);
  }
  CheckRank(dlo, 3, "[B*num_heads, H*W, key_dim]");
  const int64_t kd = dlo.t->shape[2], c = g.t->shape[1];
  if (kd < 1 || kd > kMaxKeyDim || c == 0 || c % (2 * kd)) {
    TVM_FFI_THROW(ValueError) << "d_merged: expected dim 1 == 2*num_heads*key_dim, a positive "
                              << "multiple of 2*" << kd << " (key_dim from d_lo), got " << c;
  }
  const Dims d = CheckBackwardInput(g, c / (2 * kd), kd);
  BackwardImpl(g, d, dlo_v, dhi_v);
}

// merge_backward_grads(d_merged, num_heads, key_dim, d_lo=None, d_hi=None).
inline ffi::Any MergeBackwardGrads(DLTensor* g_v, ffi::AnyView num_heads_v,
                                   ffi::AnyView key_dim_v, ffi::AnyView dlo_any,
                                   ffi::AnyView dhi_any) {
  const int64_t num_heads = CheckCount("num_heads", num_heads_v, 1);
  const int64_t key_dim = CheckCount("key_dim", key_dim_v, 1);
  const Arg g = Describe("d_merged", g_v);
  const DLTensor* dlo_t = OptionalTensor("d_lo", dlo_any);
  const DLTensor* dhi_t = OptionalTensor("d_hi", dhi_any);
  const Dims d = CheckBackwardInput(g, num_heads, key_dim);
  return BackwardImpl(g, d, dlo_t, dhi_t);
}

inline ffi::Array<ffi::Any> MergeBackwardAlloc(DLTensor* g, ffi::AnyView num_heads,
                                               ffi::AnyView key_dim) {
  return MergeBackwardGrads(g, num_heads, key_dim, ffi::AnyView(), ffi::AnyView())
      .cast<ffi::Array<ffi::Any>>();
}

// ------------------------------------------------------------------ choice reporting
// [entry, [grid], [block], dynamic smem, [[kind, name, value], ...], build source, schedule]
inline ffi::Array<ffi::Any> Report(const Plan& plan, const uintptr_t* ptrs) {
  const Kernel& k = *plan.kernel;
  ffi::Array<ffi::Any> grid, block, args;
  for (int i = 0; i < 3; ++i) {
    grid.push_back(plan.grid[i]);
    block.push_back(plan.block[i]);
  }
  ffi::Array<ffi::Any> out;
  out.push_back(ffi::String(k.entry));
  out.push_back(grid);
  out.push_back(block);
  out.push_back(static_cast<int64_t>(k.dynamic_smem_bytes));
  for (int i = 0; i < k.num_params; ++i) {
    const Param& p = k.params[i];
    ffi::Array<ffi::Any> arg;
    arg.push_back(ffi::String(p.kind == kPtr ? "ptr" : p.kind == kI32 ? "int32" : "int64"));
    arg.push_back(ffi::String(p.name));
    arg.push_back(p.kind == kPtr ? static_cast<int64_t>(ptrs[p.index]) : plan.symbols[p.index]);
    args.push_back(arg);
  }
  out.push_back(args);
  out.push_back(ffi::String(plan.build->source));
  out.push_back(ffi::String(plan.build->schedule));
  return out;
}

inline int ArchForReport(const Arg& first, const ffi::String& arch) {
  if (!arch.empty()) return ParseArch(arch);
#if PSA_NATIVE_CUDA
  if (first.t->device.device_type == kDLCUDA) return DeviceArch(first.t->device.device_id);
#endif
  TVM_FFI_THROW(ValueError) << "arch: needed for tensors on " << DeviceStr(first.t->device);
}

// The tensors of a plan_* call, checked exactly as the call itself would check them.
struct CheckedPlan {
  Arg first;  // lo or d_merged: the tensor whose device and dtype pick the build
  Dims d;
  uintptr_t ptrs[kNumRoles];
  bool present[kNumRoles];
};

inline CheckedPlan CheckPlanForward(DLTensor* lo_v, DLTensor* hi_v, DLTensor* out_v) {
  const Arg lo = Describe("lo", lo_v), hi = Describe("hi", hi_v);
  const Arg out = Describe("out", out_v);
  CheckRank(lo, 3, "[B*num_heads, H*W, key_dim]");
  if ((out.t->ndim != 4 && out.t->ndim != 3) || lo.t->shape[2] < 1 ||
      lo.t->shape[2] > kMaxKeyDim ||
      out.t->shape[1] % (2 * lo.t->shape[2]) || out.t->shape[1] == 0) {
    TVM_FFI_THROW(ValueError) << "out: expected [B, 2*num_heads*key_dim, H, W], got shape "
                              << ShapeStr(out.t->shape, out.t->ndim);
  }
  Dims d = CheckForwardInputs(lo, hi, out.t->shape[1] / (2 * lo.t->shape[2]), out.t->shape[2],
                              out.t->ndim == 4 ? out.t->shape[3] : 1);
  if (out.t->ndim == 3) {
    d.merged_ndim = 3;
    FinishDims(&d);
  }
  CheckForwardOutput(out, lo, hi, d);
  return {lo, d, {lo.ptr, hi.ptr, out.ptr, 0, 0, 0}, {true, true, true, false, false, false}};
}

inline CheckedPlan CheckPlanBackward(DLTensor* g_v, DLTensor* dlo_v, DLTensor* dhi_v) {
  const Arg g = Describe("d_merged", g_v);
  const Arg dlo = Describe("d_lo", dlo_v);
  const Arg dhi = Describe("d_hi", dhi_v);
  CheckRank(dlo, 3, "[B*num_heads, H*W, key_dim]");
  if ((g.t->ndim != 3 && g.t->ndim != 4) || dlo.t->shape[2] < 1 ||
      dlo.t->shape[2] > kMaxKeyDim ||
      g.t->shape[1] % (2 * dlo.t->shape[2]) || g.t->shape[1] == 0) {
    TVM_FFI_THROW(ValueError) << "d_merged: expected [B, 2*num_heads*key_dim, H, W], got shape "
                              << ShapeStr(g.t->shape, g.t->ndim);
  }
  const int64_t kd = dlo.t->shape[2];
  const Dims d = CheckBackwardInput(g, g.t->shape[1] / (2 * kd), kd);
  Arg outs[2] = {dlo, dhi};
  for (auto& o : outs) {
    CheckOutput(o, d.half, 3, g);
    CheckNoOverlap(o, g);
  }
  CheckNoOverlap(outs[1], outs[0]);
  return {g, d, {0, 0, 0, g.ptr, dlo.ptr, dhi.ptr}, {false, false, false, true, true, true}};
}

inline ffi::Array<ffi::Any> ReportGpu(const CheckedPlan& p, int pass, const ffi::String& arch) {
  const int a = ArchForReport(p.first, arch);
  const Config* c = FindConfig(p.d, p.first.t->dtype, true);
  return Report(MakePlan(BuildFor(*c, pass, a), pass, p.d, p.first.itemsize, p.ptrs, p.present),
                p.ptrs);
}

inline ffi::Array<ffi::Any> PlanForward(DLTensor* lo_v, DLTensor* hi_v,
                                        DLTensor* out_v, ffi::String arch) {
  return ReportGpu(CheckPlanForward(lo_v, hi_v, out_v), kForward, arch);
}

inline ffi::Array<ffi::Any> PlanBackward(DLTensor* g_v, DLTensor* dlo_v,
                                         DLTensor* dhi_v, ffi::String arch) {
  return ReportGpu(CheckPlanBackward(g_v, dlo_v, dhi_v), kBackward, arch);
}

// plan_cpu_forward(lo, hi, out) / plan_cpu_backward(d_merged, d_lo, d_hi): the CPU kernel a
// call would run, without running it: [kind ("pairs", "vec", "prefetch", "generic"), the run
// time's symbol (psa_tvm.runtime.cpu), its last argument]. The tensors' device is not checked (the
// choice depends on shapes and alignment only).
inline ffi::Array<ffi::Any> ReportCpu(const CheckedPlan& p, int pass) {
  const Config* c = FindConfig(p.d, p.first.t->dtype, true);
  const CpuChoice ch = ChooseCpu(*c, pass, p.d, p.ptrs);
  ffi::Array<ffi::Any> out;
  out.push_back(ffi::String(ch.kind));
  out.push_back(ffi::String(ch.kernel->symbol));
  out.push_back(ch.arg);
  return out;
}

inline ffi::Array<ffi::Any> PlanCpuForward(DLTensor* lo_v, DLTensor* hi_v, DLTensor* out_v) {
  return ReportCpu(CheckPlanForward(lo_v, hi_v, out_v), kForward);
}

inline ffi::Array<ffi::Any> PlanCpuBackward(DLTensor* g_v, DLTensor* dlo_v, DLTensor* dhi_v) {
  return ReportCpu(CheckPlanBackward(g_v, dlo_v, dhi_v), kBackward);
}

inline ffi::String LibraryInfo() { return ffi::String(kLibraryInfo); }

}  // namespace psa_native

TVM_FFI_DLL_EXPORT_TYPED_FUNC(merge_forward, psa_native::MergeForward);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(merge_backward, psa_native::MergeBackward);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(merge, psa_native::Merge);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(merge_forward_alloc, psa_native::MergeForwardAlloc);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(merge_backward_grads, psa_native::MergeBackwardGrads);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(merge_backward_alloc, psa_native::MergeBackwardAlloc);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(plan_forward, psa_native::PlanForward);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(plan_backward, psa_native::PlanBackward);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(plan_cpu_forward, psa_native::PlanCpuForward);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(plan_cpu_backward, psa_native::PlanCpuBackward);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(library_info, psa_native::LibraryInfo);

#endif  // PSA_NATIVE_IMPL_H_
