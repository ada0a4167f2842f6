// psa-tvm's optional PyTorch extension: merge / merge_backward / merge_attn with the outputs'
// allocation and the autograd node in C++ (docs/native.md, "The PyTorch extension").
//
// Why: on the native library, psa_tvm.torch.merge_attn still paid Python for the output's
// allocation (and tvm_ffi for converting torch tensors), and with autograd recording
// torch.autograd.Function (~6 us on the H200 host): more than one eager torch op costs. Here
// one call goes straight to C++: outputs come from torch's caching allocator
// (at::detail::empty_*), the autograd node is a torch::autograd::Function, and the kernels run
// through the artifact directory's native library (its `merge` / `merge_backward_grads` exports,
// called through the TVM-FFI C ABI on torch's current stream), so every check, every error
// message and the kernel choice stay in one place: the library.
//
// Built on first use by psa_tvm/runtime/torch_ext.py with torch.utils.cpp_extension against
// the installed torch (a C++ extension has that torch's ABI); bound to a library with bind().
#include <ATen/PythonTorchFunctionTLS.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/extension.h>

#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>

#if PSA_EXT_CUDA
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <dlfcn.h>
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>

#include <atomic>
#include <cmath>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

// The bound library's exports (TVM-FFI safe-call functions, see psa_native_impl.h).
struct Bound {
  std::mutex mu;
  TVMFFISafeCallType merge = nullptr;            // (lo, hi, num_heads, H, W, out|None)
  TVMFFISafeCallType backward_grads = nullptr;   // (d_merged, num_heads, key_dim, d_lo, d_hi)
  // The attention layout family (psa_tvm/layouts.py; absent in older libraries):
  TVMFFISafeCallType stream_run = nullptr;  // (op, pass, batch, n, num_heads, key_dim, *tensors)
  int64_t op_qkv = -1, op_attn = -1, op_attn_flash = -1;  // indices into its stream_ops
};

Bound& bound() {
  static Bound b;
  return b;
}

// TVM's parallel-for contract (c_backend_api.h), for the native library's CPU kernels.
struct ParallelGroupEnv {
  void* sync_handle;
  int32_t num_task;
};
using ParallelLambda = int (*)(int task_id, ParallelGroupEnv* env, void* cdata);

// The CPU kernels' parallel regions on torch's intra-op pool (at::parallel_for), installed into
// the bound library (psa_tvm_set_parallel_launcher in cpu_pool.cc): one set of threads for torch
// and psa-tvm, instead of the library's own pool waiting for cores on which torch's OpenMP
// workers spin after every op (single calls 5-13x slower on a 2-core host).
int TorchParallelLaunch(ParallelLambda f, void* cdata, int num_task) {
  const int tasks = num_task > 0 ? num_task : static_cast<int>(at::get_num_threads());
  ParallelGroupEnv env{nullptr, tasks};
  std::atomic<int> rc{0};
  at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int r = f(static_cast<int>(task), &env, cdata);
      if (r != 0) rc.store(r);
    }
  });
  return rc.load();
}

void Bind(const std::string& path, const std::map<std::string, int64_t>& stream_ops) {
  Bound& b = bound();
  std::lock_guard<std::mutex> lock(b.mu);
  // tvm_ffi has loaded the library already (psa_tvm.runtime.native): this takes a reference.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  TORCH_CHECK(handle != nullptr, "psa-tvm torch extension: cannot load ", path, ": ", dlerror());
  auto merge = reinterpret_cast<TVMFFISafeCallType>(dlsym(handle, "__tvm_ffi_merge"));
  auto grads =
      reinterpret_cast<TVMFFISafeCallType>(dlsym(handle, "__tvm_ffi_merge_backward_grads"));
  TORCH_CHECK(merge && grads, "psa-tvm torch extension: ", path,
              " has no merge / merge_backward_grads exports");
  b.merge = merge;
  b.backward_grads = grads;
  using SetLauncher = void* (*)(void*);  // absent in libraries without CPU kernels (or older)
  if (auto set = reinterpret_cast<SetLauncher>(dlsym(handle, "psa_tvm_set_parallel_launcher"))) {
    set(reinterpret_cast<void*>(&TorchParallelLaunch));
  }
  b.stream_run = reinterpret_cast<TVMFFISafeCallType>(dlsym(handle, "__tvm_ffi_stream_run"));
  auto index = [&](const char* name) {
    auto it = stream_ops.find(name);
    return it == stream_ops.end() ? int64_t{-1} : it->second;
  };
  b.op_qkv = index("qkv");
  b.op_attn = index("attn");
  b.op_attn_flash = index("attn_flash");
}

// A DLTensor view of an ATen tensor (no copy, no allocation; valid while `t` lives).
DLTensor AsDLTensor(const at::Tensor& t) {
  DLTensor d{};
  d.data = t.data_ptr();
  d.device.device_type = t.is_cuda() ? kDLCUDA : kDLCPU;
  d.device.device_id = t.is_cuda() ? t.get_device() : 0;
  d.ndim = static_cast<int32_t>(t.dim());
  d.dtype.lanes = 1;
  switch (t.scalar_type()) {
    case at::kHalf: d.dtype.code = kDLFloat; d.dtype.bits = 16; break;
    case at::kBFloat16: d.dtype.code = kDLBfloat; d.dtype.bits = 16; break;
    case at::kFloat: d.dtype.code = kDLFloat; d.dtype.bits = 32; break;
    case at::kDouble: d.dtype.code = kDLFloat; d.dtype.bits = 64; break;
    default:  // the library names what it expects
      d.dtype.code = kDLInt; d.dtype.bits = static_cast<uint8_t>(t.element_size() * 8);
  }
  d.shape = const_cast<int64_t*>(t.sizes().data());
  d.strides = const_cast<int64_t*>(t.strides().data());
  d.byte_offset = 0;
  return d;
}

// One packed call's arguments: tensors (viewed, not copied), ints and None.
class Args {
 public:
  void Tensor(const at::Tensor& t) {
    TORCH_CHECK(num_tensors_ < kMaxTensors && num_args_ < kMaxArgs, "psa-tvm: too many args");
    tensors_[num_tensors_] = AsDLTensor(t);
    TVMFFIAny a = None_();
    a.type_index = kTVMFFIDLTensorPtr;
    a.v_ptr = &tensors_[num_tensors_++];
    args_[num_args_++] = a;
  }
  void Int(int64_t v) {
    TORCH_CHECK(num_args_ < kMaxArgs, "psa-tvm: too many args");
    TVMFFIAny a = None_();
    a.type_index = kTVMFFIInt;
    a.v_int64 = v;
    args_[num_args_++] = a;
  }
  void None() {
    TORCH_CHECK(num_args_ < kMaxArgs, "psa-tvm: too many args");
    args_[num_args_++] = None_();
  }
  void OptionalTensor(const c10::optional<at::Tensor>& t) {
    if (t) Tensor(*t);
    else None();
  }
  const TVMFFIAny* data() const { return args_; }
  int size() const { return num_args_; }

 private:
  static TVMFFIAny None_() {
    TVMFFIAny a;
    a.type_index = kTVMFFINone;
    a.zero_padding = 0;
    a.v_int64 = 0;
    return a;
  }
  // Fixed capacity (no heap allocation per call): stream_run's 6 ints and its tensors.
  static constexpr int kMaxTensors = 8, kMaxArgs = 14;
  DLTensor tensors_[kMaxTensors];
  int num_tensors_ = 0;
  TVMFFIAny args_[kMaxArgs];
  int num_args_ = 0;
};

// Calls an export on torch's current stream of `device_of`'s device; the library's errors
// become torch's (ValueError, TypeError; a missing build a RuntimeError that starts with
// "PsaArtifactNotFound", which psa_tvm falls back on).
void Call(TVMFFISafeCallType fn, const Args& args, const at::Tensor& device_of) {
  TORCH_CHECK(fn != nullptr, "PsaArtifactNotFound: the psa-tvm torch extension is bound to no "
              "library");
  TVMFFIAny result;
  result.type_index = kTVMFFINone;
  result.zero_padding = 0;
  result.v_int64 = 0;
#if PSA_EXT_CUDA
  TVMFFIStreamHandle previous = nullptr;
  const bool cuda = device_of.is_cuda();
  if (cuda) {
    const auto stream = c10::cuda::getCurrentCUDAStream(device_of.get_device()).stream();
    TVMFFIEnvSetStream(kDLCUDA, device_of.get_device(), stream, &previous);
  }
  const int ret = fn(nullptr, args.data(), args.size(), &result);
  if (cuda) TVMFFIEnvSetStream(kDLCUDA, device_of.get_device(), previous, nullptr);
#else
  const int ret = fn(nullptr, args.data(), args.size(), &result);
#endif
  if (ret == 0) {
    if (result.type_index >= kTVMFFIStaticObjectBegin) TVMFFIObjectDecRef(result.v_obj);
    return;
  }
  const tvm::ffi::Error err = tvm::ffi::details::MoveFromSafeCallRaised();
  const std::string kind = err.kind();
  const std::string message = err.message();
  TORCH_CHECK_VALUE(kind != "ValueError", message);
  TORCH_CHECK_TYPE(kind != "TypeError", message);
  TORCH_CHECK(false, kind, ": ", message);
}

// A new tensor like `like` (dtype, device): the backend's empty() without a pass through the
// dispatcher (a plain eager allocation; a few hundred ns less per call at batch 1).
at::Tensor Empty(at::IntArrayRef sizes, const at::Tensor& like) {
#if PSA_EXT_CUDA
  if (like.is_cuda()) {
    return at::detail::empty_cuda(sizes, like.scalar_type(), like.device(), c10::nullopt);
  }
#endif
  if (like.is_cpu()) return at::detail::empty_cpu(sizes, like.scalar_type());
  return at::empty(sizes, like.options());
}

bool Supported(const at::Tensor& t) {
  const auto type = t.scalar_type();
  return type == at::kHalf || type == at::kBFloat16 || type == at::kFloat;
}

// Whether an output may be allocated for these inputs: they are what the library accepts as
// far as memory goes (contiguous tensors of one supported dtype and device, consistent
// shapes), so the output is as large as the inputs and no bad call allocates. Anything else
// goes to the library without an output, which refuses it (before allocating anything) with
// the message every other path gives.
bool MayAllocateForward(const at::Tensor& lo, const at::Tensor& hi, int64_t num_heads,
                        int64_t height, int64_t width) {
  return num_heads >= 1 && height >= 0 && width >= 0 && lo.dim() == 3 &&
         lo.sizes() == hi.sizes() && lo.scalar_type() == hi.scalar_type() && Supported(lo) &&
         lo.device() == hi.device() && lo.is_contiguous() && hi.is_contiguous() &&
         lo.size(0) % num_heads == 0 && lo.size(1) == height * width;
}

bool MayAllocateBackward(const at::Tensor& g, int64_t num_heads, int64_t key_dim) {
  return num_heads >= 1 && key_dim >= 1 && (g.dim() == 3 || g.dim() == 4) && Supported(g) &&
         g.is_contiguous() && g.size(1) == 2 * num_heads * key_dim;
}

// merge(lo, hi, num_heads, H, W, out=None).
at::Tensor Merge(const at::Tensor& lo, const at::Tensor& hi, int64_t num_heads, int64_t height,
                 int64_t width, const c10::optional<at::Tensor>& out) {
  at::Tensor result;
  if (!out && MayAllocateForward(lo, hi, num_heads, height, width)) {
    result = Empty({lo.size(0) / num_heads, 2 * num_heads * lo.size(2), height, width}, lo);
  }
  Args args;
  args.Tensor(lo);
  args.Tensor(hi);
  args.Int(num_heads);
  args.Int(height);
  args.Int(width);
  if (out) args.Tensor(*out);
  else if (result.defined()) args.Tensor(result);
  else args.None();
  Call(bound().merge, args, lo);
  return out ? *out : result;
}

// merge_backward(d_merged, num_heads, key_dim, d_lo=None, d_hi=None) -> (d_lo, d_hi).
std::tuple<at::Tensor, at::Tensor> MergeBackward(const at::Tensor& g, int64_t num_heads,
                                                 int64_t key_dim,
                                                 const c10::optional<at::Tensor>& d_lo,
                                                 const c10::optional<at::Tensor>& d_hi) {
  at::Tensor fresh[2];
  if ((!d_lo || !d_hi) && MayAllocateBackward(g, num_heads, key_dim)) {
    const int64_t n = g.dim() == 4 ? g.size(2) * g.size(3) : g.size(2);
    for (int i = 0; i < 2; ++i) {
      if (!(i == 0 ? d_lo : d_hi)) {
        fresh[i] = Empty({g.size(0) * num_heads, n, key_dim}, g);
      }
    }
  }
  Args args;
  args.Tensor(g);
  args.Int(num_heads);
  args.Int(key_dim);
  const c10::optional<at::Tensor>* given[2] = {&d_lo, &d_hi};
  for (int i = 0; i < 2; ++i) {
    if (*given[i]) args.Tensor(**given[i]);
    else if (fresh[i].defined()) args.Tensor(fresh[i]);
    else args.None();
  }
  Call(bound().backward_grads, args, g);
  return {d_lo ? *d_lo : fresh[0], d_hi ? *d_hi : fresh[1]};
}

class MergeFunction : public torch::autograd::Function<MergeFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& lo,
                            const at::Tensor& hi, int64_t num_heads, int64_t height,
                            int64_t width) {
    ctx->saved_data["num_heads"] = num_heads;
    ctx->saved_data["key_dim"] = lo.size(2);
    return Merge(lo, hi, num_heads, height, width, c10::nullopt);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto [d_lo, d_hi] = MergeBackward(grads[0].contiguous(), ctx->saved_data["num_heads"].toInt(),
                                      ctx->saved_data["key_dim"].toInt(), c10::nullopt,
                                      c10::nullopt);
    return {d_lo, d_hi, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// psa_tvm.torch.merge_attn: differentiable when autograd records.
at::Tensor MergeAttn(const at::Tensor& lo, const at::Tensor& hi, int64_t num_heads,
                     int64_t height, int64_t width) {
  // The autograd node only when one is needed: Function::apply's bookkeeping costs host time.
  // (A lo of the wrong rank goes to Merge, whose call the library refuses with its message.)
  if (at::GradMode::is_enabled() && (lo.requires_grad() || hi.requires_grad()) &&
      lo.dim() == 3) {
    return MergeFunction::apply(lo, hi, num_heads, height, width);
  }
  return Merge(lo, hi, num_heads, height, width, c10::nullopt);
}

// ---- eager lanes: psa_tvm.torch.merge_attn and the allocating psa_tvm.merge /
// merge_backward call these first, with their Python arguments as they are. Each answers None
// when the call is not a plain eager one (then the Python function takes its ordinary path,
// which decides and explains), so the Python side is one check (torch.compile tracing, which
// only Python can see) and one call: at batch 1 the op is host-bound, and every Python-level
// check costs about what a torch op's argument parsing does.

// A plain tensor: torch.Tensor itself (or Parameter; no subclass, which may mean something
// else), strided, not under a functorch transform.
const at::Tensor* Plain(PyObject* obj) {
  if (!THPVariable_CheckExact(obj)) return nullptr;
  const at::Tensor& t = THPVariable_Unpack(obj);
  static const c10::DispatchKeySet wrapped({c10::DispatchKey::FuncTorchBatched,
                                            c10::DispatchKey::FuncTorchGradWrapper,
                                            c10::DispatchKey::Functionalize,
                                            c10::DispatchKey::Python});
  if (t.layout() != at::kStrided || !(t.key_set() & wrapped).empty()) return nullptr;
  return &t;
}

// An exact Python int (not a bool) that fits int64_t.
bool Int64(PyObject* obj, int64_t* value) {
  if (!PyLong_CheckExact(obj)) return false;
  int overflow = 0;
  *value = PyLong_AsLongLongAndOverflow(obj, &overflow);
  return overflow == 0 && !(*value == -1 && PyErr_Occurred());
}

// No dispatch or function mode is active (they must see the call: the torch.library op).
bool NoModes() {
  return c10::impl::TorchDispatchModeTLS::stack_len() == 0 &&
         !at::impl::torch_function_mode_enabled();
}

PyObject* Wrap(at::Tensor t) { return THPVariable_Wrap(std::move(t)); }

// An optional output: None, or a plain tensor (else not a plain call).
bool OptionalPlain(PyObject* obj, c10::optional<at::Tensor>* out) {
  if (obj == Py_None) return true;
  const at::Tensor* t = Plain(obj);
  if (t) *out = *t;
  return t != nullptr;
}

// The lanes are CPython METH_FASTCALL functions, not pybind11 ones: pybind11's overload
// dispatch costs a few hundred ns per call, a few percent of a copy_ at batch 1. So they
// translate C++ errors themselves, as torch's own bindings do (message without backtrace).
template <typename Body>
PyObject* Guarded(const char* name, Py_ssize_t nargs, Py_ssize_t expected, Body body) {
  if (nargs != expected) {
    PyErr_Format(PyExc_TypeError, "%s: expected %zd arguments, got %zd", name, expected, nargs);
    return nullptr;
  }
  try {
    return body();
  } catch (const c10::ValueError& e) {
    PyErr_SetString(PyExc_ValueError, e.what_without_backtrace());
  } catch (const c10::TypeError& e) {
    PyErr_SetString(PyExc_TypeError, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

// The forward's (lo, hi, num_heads, H, W) as plain tensors and exact ints, or false.
struct ForwardArgs {
  const at::Tensor* lo = nullptr;
  const at::Tensor* hi = nullptr;
  int64_t num_heads = 0, height = 0, width = 0;
  bool Read(PyObject* const* args) {
    lo = Plain(args[0]);
    hi = lo ? Plain(args[1]) : nullptr;
    return hi && Int64(args[2], &num_heads) && Int64(args[3], &height) &&
           Int64(args[4], &width);
  }
};

// merge_attn(lo, hi, num_heads, H, W), or None.
PyObject* MergeAttnEager(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return Guarded("merge_attn_eager", nargs, 5, [&]() -> PyObject* {
    ForwardArgs a;
    if (!a.Read(args) || !NoModes()) Py_RETURN_NONE;
    return Wrap(MergeAttn(*a.lo, *a.hi, a.num_heads, a.height, a.width));
  });
}

// merge(lo, hi, num_heads, H, W, out) (out None: allocated), or None.
PyObject* MergeEager(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return Guarded("merge_eager", nargs, 6, [&]() -> PyObject* {
    ForwardArgs a;
    c10::optional<at::Tensor> given;
    if (!a.Read(args) || !OptionalPlain(args[5], &given) || !NoModes()) Py_RETURN_NONE;
    if (given) {
      Merge(*a.lo, *a.hi, a.num_heads, a.height, a.width, given);
      Py_INCREF(args[5]);
      return args[5];  // the caller's object itself
    }
    return Wrap(Merge(*a.lo, *a.hi, a.num_heads, a.height, a.width, c10::nullopt));
  });
}

// merge_backward(d_merged, num_heads, key_dim, d_lo, d_hi) (None: allocated), or None.
PyObject* MergeBackwardEager(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return Guarded("merge_backward_eager", nargs, 5, [&]() -> PyObject* {
    const at::Tensor* g = Plain(args[0]);
    int64_t heads, width;
    c10::optional<at::Tensor> given[2];
    if (!g || !Int64(args[1], &heads) || !Int64(args[2], &width) ||
        !OptionalPlain(args[3], &given[0]) || !OptionalPlain(args[4], &given[1]) ||
        !NoModes()) {
      Py_RETURN_NONE;
    }
    auto [new_lo, new_hi] = MergeBackward(*g, heads, width, given[0], given[1]);
    PyObject* pair = PyTuple_New(2);
    PyObject* lo = given[0] ? (Py_INCREF(args[3]), args[3]) : Wrap(std::move(new_lo));
    PyObject* hi = given[1] ? (Py_INCREF(args[4]), args[4]) : Wrap(std::move(new_hi));
    if (pair == nullptr || lo == nullptr || hi == nullptr) {
      Py_XDECREF(pair), Py_XDECREF(lo), Py_XDECREF(hi);
      return nullptr;
    }
    PyTuple_SET_ITEM(pair, 0, lo);  // steals
    PyTuple_SET_ITEM(pair, 1, hi);
    return pair;
  });
}

PyMethodDef kLanes[] = {
    {"merge_attn_eager", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
                             MergeAttnEager)),
     METH_FASTCALL, "merge_attn(lo, hi, num_heads, H, W) for a plain eager call, else None"},
    {"merge_eager", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(MergeEager)),
     METH_FASTCALL,
     "merge(lo, hi, num_heads, H, W, out) (out None: allocated) for a plain eager call, "
     "else None"},
    {"merge_backward_eager", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
                                 MergeBackwardEager)),
     METH_FASTCALL,
     "merge_backward(d_merged, num_heads, key_dim, d_lo, d_hi) (None: allocated) for a plain "
     "eager call, else None"},
};

// One layout-family kernel (psa_tvm/layouts.py): tensors in the op's order, output last.
void StreamRun(int64_t op, int64_t pass, int64_t batch, int64_t n, int64_t num_heads,
               int64_t key_dim, std::initializer_list<at::Tensor> tensors) {
  const Bound& b = bound();
  TORCH_CHECK(b.stream_run != nullptr && op >= 0, "PsaArtifactNotFound: the bound native "
              "library has no attention layout family (rebuild with psa-tvm build --attention)");
  Args args;
  for (int64_t v : {op, pass, batch, n, num_heads, key_dim}) args.Int(v);
  for (const at::Tensor& t : tensors) args.Tensor(t);
  Call(b.stream_run, args, *tensors.begin());
}

// ``[B, nh, N, count*kd]`` view of the packed ``p [B, N, nh, 4*kd]`` at chunk ``first``.
at::Tensor Chunk(const at::Tensor& p, int64_t key_dim, int64_t first, int64_t count) {
  return p.as_strided({p.size(0), p.size(2), p.size(1), count * key_dim},
                      {p.stride(0), p.stride(2), p.stride(1), 1},
                      p.storage_offset() + first * key_dim);
}

// At batch 1: V_lo and V_hi of ``p [1, N, nh, 4*kd]`` as one ``[2, nh, N, kd]`` view (the
// halves one kd apart: the batch stride is kd).
at::Tensor VPair(const at::Tensor& p, int64_t key_dim) {
  return p.as_strided({2, p.size(2), p.size(1), key_dim}, {key_dim, p.stride(2), p.stride(1), 1},
                      p.storage_offset() + 2 * key_dim);
}

// [B, N, nh, d] (contiguous) as the [B, nh*d, H, W] channels_last tensor it is.
at::Tensor ChannelsLastOf(const at::Tensor& p, int64_t height, int64_t width) {
  return p.view({p.size(0), height, width, p.size(2) * p.size(3)}).permute({0, 3, 1, 2});
}

// psa_tvm.attention._flash_forward / _cudnn_forward for inference, in C++ (the same kernels
// and calls, in the same order): pack -> cuDNN on the full V (or two flash calls) -> back to
// NCHW. psa_attention has checked the arguments; one call instead of a dozen Python-level
// torch calls (batch-1 YOLO inference is host-bound).
at::Tensor AttentionInference(const at::Tensor& qkv, int64_t num_heads, int64_t key_dim,
                              int64_t height, int64_t width, bool flash) {
  const Bound& b = bound();
  const int64_t batch = qkv.size(0), n = height * width;
  // A channels_last qkv is the packed tensor itself (psa_tvm.attention._pack): no pack, and a
  // channels_last result (cuDNN's output as it is; flash's halves joined by one cat).
  const bool channels_last =
      !qkv.is_contiguous() && qkv.is_contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor p;
  if (channels_last) {
    p = qkv.permute({0, 2, 3, 1}).reshape({batch, n, num_heads, 4 * key_dim});
  } else {
    p = Empty({batch, n, num_heads, 4 * key_dim}, qkv);
    StreamRun(b.op_qkv, 1, batch, n, num_heads, key_dim, {qkv, p});
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(key_dim));
  const at::Tensor q = Chunk(p, key_dim, 0, 1), k = Chunk(p, key_dim, 1, 1);
  if (!flash) {
    const at::Tensor o = std::get<0>(at::_scaled_dot_product_cudnn_attention(
        q, k, Chunk(p, key_dim, 2, 2), c10::nullopt, false, 0.0, false, false, scale))
        .transpose(1, 2).contiguous();
    if (channels_last) return ChannelsLastOf(o, height, width);
    at::Tensor out = Empty({batch, 2 * num_heads * key_dim, height, width}, qkv);
    StreamRun(b.op_attn, 0, batch, n, num_heads, key_dim, {o, out});
    return out;
  }
  at::Tensor lo, hi;
  if (batch == 1) {  // one flash call for both halves (psa_tvm.attention._flash_inference)
    const at::Tensor o = std::get<0>(at::_scaled_dot_product_flash_attention(
        q.expand({2, -1, -1, -1}), k.expand({2, -1, -1, -1}), VPair(p, key_dim), 0.0, false,
        false, scale)).transpose(1, 2).contiguous();
    lo = o.narrow(0, 0, 1);
    hi = o.narrow(0, 1, 1);
  } else {
    lo = std::get<0>(at::_scaled_dot_product_flash_attention(
        q, k, Chunk(p, key_dim, 2, 1), 0.0, false, false, scale)).transpose(1, 2).contiguous();
    hi = std::get<0>(at::_scaled_dot_product_flash_attention(
        q, k, Chunk(p, key_dim, 3, 1), 0.0, false, false, scale)).transpose(1, 2).contiguous();
  }
  if (channels_last) return ChannelsLastOf(at::cat({lo, hi}, 3), height, width);
  at::Tensor out = Empty({batch, 2 * num_heads * key_dim, height, width}, qkv);
  StreamRun(b.op_attn_flash, 0, batch, n, num_heads, key_dim, {lo, hi, out});
  return out;
}

}  // namespace

// A Python module (pybind11), not a torch.library op: calling a custom op from Python parses
// its arguments against the schema (~4 us); a pybind11 function with tensor casters ~1 us.
// torch.compile, export and tensor subclasses keep using the torch.library op
// psa_tvm::merge_attn; this module serves eager calls on plain tensors only.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("bind", &Bind, "bind(path, stream_ops): bind to a native library");
  m.def("merge", &Merge, "merge(lo, hi, num_heads, H, W, out) -> out (allocated when None)");
  m.def("merge_backward", &MergeBackward,
        "merge_backward(d_merged, num_heads, key_dim, d_lo, d_hi) -> (d_lo, d_hi)");
  m.def("merge_attn", &MergeAttn, "merge_attn(lo, hi, num_heads, H, W) -> merged");
  for (PyMethodDef& lane : kLanes) {
    m.add_object(lane.ml_name, py::reinterpret_steal<py::object>(PyCFunction_New(&lane, nullptr)));
  }
  m.def("attention_inference", &AttentionInference,
        "attention_inference(qkv, num_heads, key_dim, H, W, flash) -> [B, nh*2*kd, H, W]");
}
