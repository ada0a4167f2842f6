// psa-tvm native run time: the attention layout family (psa_tvm/layouts.py) on CUDA.
//
// Included after psa_native_impl.h (it reuses its validation, launch and reporting helpers).
// One exported entry runs any member of the family, so that the pack and the merges around
// flash/cuDNN attention cost one native call each instead of a Python launch:
//
//   stream_run(op, pass, batch, n, num_heads, key_dim, *tensors)
//   stream_plan(op, pass, batch, n, num_heads, key_dim, arch, *tensors) -> the choice, as plan_*
//
// `op` indexes library_info()["stream_ops"]; `pass` is 0 (forward: the gather into NCHW) or 1
// (backward: the scatter); the tensors come in StreamOp.tensor_names(pass) order (inputs first,
// the output last). The checks are PsaStreamRuntimeOp.check's, in C++, before the launch; the
// kernel choice is psa_tvm/runtime/plan.py's (the same rule as the merge's).
#ifndef PSA_NATIVE_STREAM_H_
#define PSA_NATIVE_STREAM_H_

namespace psa_native {

extern const char* const kStreamOps[];
extern const int kNumStreamOps;
extern const StreamConfig kStreamConfigs[];
extern const int kNumStreamConfigs;

constexpr int kStreamFixedArgs = 6;  // op, pass, batch, n, num_heads, key_dim

struct StreamCall {
  const StreamConfig* config = nullptr;
  int pass = 0;
  int64_t batch = 0, n = 0;
  int num_tensors = 0;
  Arg tensors[kMaxStreamTensors];
  uintptr_t ptrs[kMaxStreamTensors] = {};
  int64_t views[kMaxStreamTensors][kMaxStreamRank] = {};  // the kernels' shapes for B, N
  int64_t merged_numel = 0;
};

inline const StreamConfig& FindStreamConfig(int64_t op, int64_t key_dim, int64_t num_heads,
                                            DLDataType dtype) {
  for (int i = 0; i < kNumStreamConfigs; ++i) {
    const StreamConfig& c = kStreamConfigs[i];
    if (c.op == op && c.key_dim == key_dim && c.num_heads == num_heads &&
        c.dtype_code == dtype.code && c.dtype_bits == dtype.bits) {
      return c;
    }
  }
  PSA_THROW_MISSING << "this psa-tvm native library has no '" << kStreamOps[op]
                    << "' build for key_dim=" << key_dim << ", num_heads=" << num_heads
                    << ", dtype " << DtypeStr(dtype) << "; run `psa-tvm build --attention "
                    << "--key-dim " << key_dim << " --num-heads " << num_heads << " --dtype "
                    << DtypeStr(dtype) << "` into its directory";
}

// Parses and checks one call: everything PsaStreamRuntimeOp.check checks, in its order.
inline StreamCall CheckStreamCall(const ffi::AnyView* args, int num_args, int first_tensor) {
  if (num_args < first_tensor + 1) {
    TVM_FFI_THROW(TypeError) << "stream call: expected (op, pass, batch, n, num_heads, key_dim"
                             << (first_tensor > kStreamFixedArgs ? ", arch" : "")
                             << ", *tensors), got " << num_args << " arguments";
  }
  const int64_t op = CheckCount("op", args[0], 0);
  if (op >= kNumStreamOps) {
    TVM_FFI_THROW(ValueError) << "op: expected an index < " << kNumStreamOps
                              << " (library_info()['stream_ops']), got " << op;
  }
  const int64_t pass = CheckCount("pass", args[1], 0);
  StreamCall call;
  call.batch = CheckCount("batch", args[2], 0);
  call.n = CheckCount("n", args[3], 0);
  const int64_t num_heads = CheckCount("num_heads", args[4], 1);
  const int64_t key_dim = CheckCount("key_dim", args[5], 1);
  if (pass > 1) {
    TVM_FFI_THROW(ValueError) << "pass: expected 0 (forward) or 1 (backward), got " << pass;
  }
  const int num_tensors = num_args - first_tensor;
  if (num_tensors > kMaxStreamTensors) {
    TVM_FFI_THROW(ValueError) << "tensors: op '" << kStreamOps[op] << "' takes at most "
                              << kMaxStreamTensors << " tensors, got " << num_tensors;
  }
  // Describe every tensor first: its dtype picks the configuration.
  static const char* const kPositional[kMaxStreamTensors] = {
      "tensors[0]", "tensors[1]", "tensors[2]", "tensors[3]",
      "tensors[4]", "tensors[5]", "tensors[6]", "tensors[7]"};
  const DLTensor* raw[kMaxStreamTensors];
  for (int i = 0; i < num_tensors; ++i) {
    auto t = args[first_tensor + i].try_cast<DLTensor*>();
    if (!t) {
      TVM_FFI_THROW(TypeError) << kPositional[i] << ": expected a tensor, got "
                               << args[first_tensor + i].GetTypeKey();
    }
    raw[i] = *t;
  }
  const Arg first = Describe(kPositional[0], raw[0]);
  CheckDtypeSupported(first);
  const StreamConfig& c = FindStreamConfig(op, key_dim, num_heads, first.t->dtype);
  const StreamTensors& spec = c.tensors[pass];
  if (spec.num == 0) {
    TVM_FFI_THROW(ValueError) << "pass: op '" << kStreamOps[op] << "' has no "
                              << (pass == kForward ? "forward" : "backward") << " pass";
  }
  if (num_tensors != spec.num) {
    std::ostringstream names;
    for (int i = 0; i < spec.num; ++i) names << (i ? ", " : "") << spec.names[i];
    TVM_FFI_THROW(ValueError) << "tensors: op '" << kStreamOps[op] << "' "
                              << (pass == kForward ? "forward" : "backward") << " expects ["
                              << names.str() << "], got " << num_tensors << " tensors";
  }
  call.config = &c;
  call.pass = static_cast<int>(pass);
  call.num_tensors = num_tensors;
  const int64_t vars[3] = {0, call.batch, call.n};
  for (int i = 0; i < num_tensors; ++i) {
    Arg& a = call.tensors[i];
    a = Describe(spec.names[i], raw[i]);
    if (a.t->dtype.code != c.dtype_code || a.t->dtype.bits != c.dtype_bits) {
      TVM_FFI_THROW(TypeError) << a.name << ": expected dtype " << c.dtype_name << ", got "
                               << DtypeStr(a.t->dtype);
    }
    const StreamShape& shape = spec.shapes[i];
    int64_t numel = 1;
    bool overflow = false;
    for (int k = 0; k < shape.ndim; ++k) {
      const int64_t extent = shape.var[k] == kConst ? shape.extent[k] : vars[shape.var[k]];
      call.views[i][k] = extent;
      overflow |= __builtin_mul_overflow(numel, extent, &numel);
    }
    if (overflow) {
      TVM_FFI_THROW(ValueError) << "shape: B=" << call.batch << ", N=" << call.n
                                << " is too large";
    }
    if (spec.flat[i]) {
      if (a.numel != numel) {
        TVM_FFI_THROW(ValueError) << a.name << ": expected " << numel << " elements ("
                                  << ShapeStr(call.views[i], shape.ndim) << "), got shape "
                                  << ShapeStr(a.t->shape, a.t->ndim);
      }
    } else {
      bool same = a.t->ndim == shape.ndim;
      for (int k = 0; same && k < shape.ndim; ++k) same = a.t->shape[k] == call.views[i][k];
      if (!same) {
        TVM_FFI_THROW(ValueError) << a.name << ": expected shape "
                                  << ShapeStr(call.views[i], shape.ndim) << ", got "
                                  << ShapeStr(a.t->shape, a.t->ndim);
      }
    }
    CheckLayout(a);
    if (i) CheckSameDevice(a, call.tensors[0]);
    call.ptrs[i] = a.ptr;
  }
  const Arg& output = call.tensors[num_tensors - 1];
  for (int i = 0; i + 1 < num_tensors; ++i) CheckNoOverlap(output, call.tensors[i]);
  call.merged_numel = call.batch * c.num_streams * c.num_heads * c.key_dim * call.n;
  return call;
}

// The kernel, grid and block of a checked call: runtime/plan.py's choice_kernel rule.
inline Plan MakeStreamPlan(const StreamCall& call) {
  const StreamConfig& c = *call.config;
  const char* pass_name = call.pass == kForward ? "forward" : "backward";
  if (c.build[call.pass] < 0) {
    PSA_THROW_MISSING << "this psa-tvm native library has no " << pass_name << " build of '"
                      << kStreamOps[c.op] << "' for key_dim=" << c.key_dim << ", num_heads="
                      << c.num_heads << ", dtype " << c.dtype_name;
  }
  const Build& build = kBuilds[c.build[call.pass]];
  Plan plan = ChooseKernel(build, call.pass, call.n, call.merged_numel,
                           CommonAlignment(call.ptrs, nullptr, call.num_tensors),
                           c.dtype_bits / 8);
  const Kernel& k = *plan.kernel;
  for (int s = 0; s < k.num_symbols; ++s) {
    const Symbol& sym = k.symbols[s];
    plan.symbols[s] = call.views[sym.role][sym.axis] / sym.divisor;
  }
  SetLaunchDims(&plan, call.batch, call.n, nullptr);
  return plan;
}

inline void StreamRun(const ffi::AnyView* args, int num_args) {
  const StreamCall call = CheckStreamCall(args, num_args, kStreamFixedArgs);
  const DLDevice dev = call.tensors[0].t->device;
  if (dev.device_type != kDLCUDA) {
    TVM_FFI_THROW(ValueError) << call.tensors[0].name << ": expected a CUDA tensor, got one on "
                              << DeviceStr(dev) << " (the layout family runs on CUDA; "
                              << "psa_tvm.attention permutes CPU tensors with torch)";
  }
  if (call.merged_numel == 0) return;
#if PSA_NATIVE_CUDA
  const int arch = DeviceArch(dev.device_id);
  const Plan plan = MakeStreamPlan(call);
  BinaryFor(*plan.build, arch);  // no code for this GPU: refused before anything runs
  DeviceScope scope(dev.device_id);
  LaunchCuda(plan, dev.device_id, arch, call.ptrs);
#else
  PSA_THROW_MISSING << "this psa-tvm native library was built without CUDA (no CUDA toolkit "
                    << "where `psa-tvm build` ran)";
#endif
}

inline ffi::Array<ffi::Any> StreamPlan(const ffi::AnyView* args, int num_args) {
  const StreamCall call = CheckStreamCall(args, num_args, kStreamFixedArgs + 1);
  auto arch = args[kStreamFixedArgs].try_cast<ffi::String>();
  if (!arch) {
    TVM_FFI_THROW(TypeError) << "arch: expected a str such as 'sm_90' (or ''), got "
                             << args[kStreamFixedArgs].GetTypeKey();
  }
  ArchForReport(call.tensors[0], *arch);  // checks the arch (or that the tensors are on a GPU)
  return Report(MakeStreamPlan(call), call.ptrs);
}

}  // namespace psa_native

// Variadic (the ops take 2 to 7 tensors): exported as packed functions.
extern "C" {
TVM_FFI_DLL_EXPORT int __tvm_ffi_stream_run(void*, const TVMFFIAny* args, int32_t num_args,
                                            TVMFFIAny* result) {
  TVM_FFI_SAFE_CALL_BEGIN();
  (void)result;
  psa_native::StreamRun(reinterpret_cast<const tvm::ffi::AnyView*>(args), num_args);
  TVM_FFI_SAFE_CALL_END();
}

TVM_FFI_DLL_EXPORT int __tvm_ffi_stream_plan(void*, const TVMFFIAny* args, int32_t num_args,
                                             TVMFFIAny* result) {
  TVM_FFI_SAFE_CALL_BEGIN();
  tvm::ffi::Any value = psa_native::StreamPlan(
      reinterpret_cast<const tvm::ffi::AnyView*>(args), num_args);
  *reinterpret_cast<tvm::ffi::Any*>(result) = std::move(value);
  TVM_FFI_SAFE_CALL_END();
}
}

#endif  // PSA_NATIVE_STREAM_H_
