// A small thread pool behind TVM's parallel-for ABI, so that an LLVM-built library with
// `parallel` loops runs when it is loaded by tvm_ffi alone: the generated code calls through
// the `__TVMBackendParallelLaunch` pointer, which only libtvm_runtime would otherwise fill in.
// Workers spin briefly before sleeping, so back-to-back calls do not pay a futex wake-up.
// Where torch is loaded the regions can run on torch's threads instead: an external launcher
// (below: psa_tvm_set_parallel_launcher, psa_tvm_use_gomp) takes the pool's place.
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace {
struct GroupEnv { void* sync_handle; int32_t num_task; };
typedef int (*Lambda)(int task_id, GroupEnv* penv, void* cdata);
constexpr int kSpins = 1 << 12;

inline void Relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

class Pool {
 public:
  Pool() {
    int n = 0;
    for (const char* var : {"PSA_TVM_CPU_THREADS", "TVM_NUM_THREADS", "OMP_NUM_THREADS"}) {
      const char* value = getenv(var);
      if (value != nullptr && atoi(value) > 0) { n = atoi(value); break; }
    }
    if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
    size_ = n > 0 ? n : 1;
    for (int i = 1; i < size_; ++i) workers_.emplace_back([this, i] { Work(i); });
  }
  ~Pool() {
    { std::lock_guard<std::mutex> lock(mu_); stop_ = true; generation_.fetch_add(1); }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int Launch(Lambda f, void* cdata, int num_task) {
    std::lock_guard<std::mutex> one_launch(launch_mu_);  // one parallel region at a time
    int tasks = num_task > 0 && num_task < size_ ? num_task : size_;
    env_ = GroupEnv{nullptr, tasks};
    f_ = f; cdata_ = cdata; tasks_ = tasks; rc_.store(0);
    pending_.store(tasks - 1);
    { std::lock_guard<std::mutex> lock(mu_); generation_.fetch_add(1); }
    wake_.notify_all();
    int rc = f(0, &env_, cdata);
    for (int i = 0; pending_.load() != 0; ++i) {
      if (i < kSpins) { Relax(); continue; }
      std::unique_lock<std::mutex> lock(mu_);
      done_.wait(lock, [this] { return pending_.load() == 0; });
    }
    return rc != 0 ? rc : rc_.load();
  }

 private:
  void Work(int id) {
    uint64_t seen = 0;
    for (;;) {
      for (int i = 0; generation_.load() == seen && i < kSpins; ++i) Relax();
      if (generation_.load() == seen) {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return generation_.load() != seen; });
      }
      seen = generation_.load();
      if (stop_) return;
      if (id >= tasks_) continue;
      int rc = f_(id, &env_, cdata_);
      if (rc != 0) rc_.store(rc);
      if (pending_.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> lock(mu_);
        done_.notify_one();
      }
    }
  }
  int size_ = 1;
  std::vector<std::thread> workers_;
  std::mutex mu_, launch_mu_;
  std::condition_variable wake_, done_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0}, rc_{0};
  std::atomic<bool> stop_{false};
  Lambda f_ = nullptr;
  void* cdata_ = nullptr;
  int tasks_ = 0;
  GroupEnv env_{nullptr, 1};
};

thread_local bool tls_serial = false;  // psa_tvm_pool_serial: this thread's launches run inline

// A parallel-for from outside, same signature as Launch: psa-tvm's PyTorch extension sets
// torch's intra-op pool here (psa_tvm_set_parallel_launcher), or, without the extension,
// psa_tvm.runtime.cpu_pool sets GompLaunch below (psa_tvm_use_gomp), so that the kernels run on
// torch's threads.
// Why: after each torch CPU op its OpenMP workers spin for a while on every core, and this pool's
// workers then wait for the scheduler to preempt them; on a 2-core host that made single calls
// 5-13x slower than their usual time.
typedef int (*LaunchFn)(Lambda f, void* cdata, int num_task);
std::atomic<LaunchFn> g_external{nullptr};

// GNU OpenMP's entry points (libgomp's ABI, stable since GCC 4.9), found in a library torch has
// already loaded (psa_tvm_use_gomp): a region run through GOMP_parallel from a thread that runs
// torch CPU ops lands on the same OpenMP workers torch's own ops use, so there is one set of
// threads again -- what the extension's at::parallel_for gives, without compiling anything.
struct Gomp {
  void (*parallel)(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) = nullptr;
  int (*thread_num)() = nullptr;
  int (*team_size)() = nullptr;    // omp_get_num_threads
  int (*max_threads)() = nullptr;  // omp_get_max_threads: this thread's OpenMP default
  int (*torch_threads)() = nullptr;  // at::get_num_threads, when the library is libtorch_cpu
  void* handle = nullptr;          // kept open: the symbols stay in use for the process
};
Gomp g_gomp;
std::mutex g_gomp_mu;  // psa_tvm_use_gomp: one install or removal at a time

struct GompRegion {
  Lambda f;
  void* cdata;
  GroupEnv env;
  std::atomic<int> rc;
};

void GompBody(void* data) {
  auto* region = static_cast<GompRegion*>(data);
  // The team may be smaller than asked (a nested region gets one thread): stride over the tasks.
  const int step = g_gomp.team_size();
  for (int task = g_gomp.thread_num(); task < region->env.num_task; task += step) {
    const int rc = region->f(task, &region->env, region->cdata);
    if (rc != 0) region->rc.store(rc);
  }
}

// TVM's parallel-for contract on torch's OpenMP threads: n = num_task or torch's thread count
// (torch.get_num_threads() on this thread: at::get_num_threads when the symbols came from
// libtorch_cpu -- it also sets this thread's OpenMP default to torch's count, as torch's own
// ops do -- else omp_get_max_threads), on a team of that many threads, a failing task's
// nonzero result returned (as the own pool and the extension's launcher do).
int GompLaunch(Lambda f, void* cdata, int num_task) {
  int threads = g_gomp.torch_threads ? g_gomp.torch_threads() : g_gomp.max_threads();
  if (threads < 1) threads = 1;
  const int tasks = num_task > 0 ? num_task : threads;
  GompRegion region{f, cdata, GroupEnv{nullptr, tasks}, {0}};
  if (tasks == 1 || threads == 1) {  // no team to wake
    for (int task = 0; task < tasks; ++task) {
      const int rc = f(task, &region.env, cdata);
      if (rc != 0) region.rc.store(rc);
    }
  } else {
    // num_threads 0: the team this thread's OpenMP default gives, i.e. `threads` (torch sets the
    // default to its count) and the same team torch's ops reuse; threads past the last task
    // return at once. No num_threads clause, like at::parallel_for: libgomp re-sizes its pool
    // when the requested size changes between regions (pytorch#32008).
    g_gomp.parallel(&GompBody, &region, 0, 0);
  }
  return region.rc.load();
}

int Launch(Lambda f, void* cdata, int num_task) {
  if (tls_serial) {  // one task over the whole range, on the calling thread: no wake-up
    GroupEnv env{nullptr, 1};
    return f(0, &env, cdata);
  }
  if (LaunchFn external = g_external.load(std::memory_order_acquire)) {
    return external(f, cdata, num_task);
  }
  static Pool* pool = new Pool();  // started on first use; never destroyed (exit-safe)
  return pool->Launch(f, cdata, num_task);
}
}  // namespace

extern "C" void* __TVMBackendParallelLaunch;
// Runs when the library is loaded: fill the pointer unless a TVM runtime already did.
__attribute__((constructor)) static void psa_tvm_install_pool() {
  if (__TVMBackendParallelLaunch == nullptr) {
    __TVMBackendParallelLaunch = reinterpret_cast<void*>(&Launch);
  }
}

// TVM-FFI function `psa_tvm_own_pool()`: use this pool even where TVM is imported. TVM's loader
// fills the pointer after loading with its own pool, which defaults to half the cores (one
// thread on a 2-core host: measured 2.3 instead of 1.2 ms). No arguments, returns None.
extern "C" int __tvm_ffi_psa_tvm_own_pool(void*, const void*, int32_t, void*) {
  __TVMBackendParallelLaunch = reinterpret_cast<void*>(&Launch);
  return 0;
}

// `psa_tvm_pool_serial(on)`: run this thread's parallel regions inline (1: on, 0: off) until
// called again; returns the previous setting. The native library turns it on around calls too
// small to pay for waking the workers (a plain C function, not exported by the libraries).
extern "C" int psa_tvm_pool_serial(int on) {
  const int previous = tls_serial ? 1 : 0;
  tls_serial = on != 0;
  return previous;
}

// `psa_tvm_set_parallel_launcher(fn)`: run every parallel region through `fn` (an
// `int(int (*)(int, {void*, int32_t}*, void*), void*, int)` with TVM's parallel-for contract:
// run tasks 0..n-1, n = num_task or the launcher's thread count when num_task is 0), or through
// this pool again when `fn` is null; returns the previous one. Exported (the libraries are built
// with hidden visibility) for psa-tvm's PyTorch extension, which finds it with dlsym.
extern "C" __attribute__((visibility("default"))) void* psa_tvm_set_parallel_launcher(void* fn) {
  return reinterpret_cast<void*>(g_external.exchange(reinterpret_cast<LaunchFn>(fn)));
}

// `psa_tvm_parallel_launcher_kind()`: which threads run the parallel regions now: 0 this
// library's own pool, 1 GNU OpenMP's through psa_tvm_use_gomp, 2 another launcher (psa-tvm's
// PyTorch extension). For psa_tvm.runtime.cpu_pool (tests, the benchmark's record).
extern "C" __attribute__((visibility("default"))) int psa_tvm_parallel_launcher_kind() {
  const LaunchFn current = g_external.load(std::memory_order_acquire);
  return current == nullptr ? 0 : current == &GompLaunch ? 1 : 2;
}

// `psa_tvm_use_gomp(path)`: run the parallel regions on GNU OpenMP's threads, with the entry
// points that `path` -- a library this process has loaded already (libtorch_cpu, or libgomp
// itself; never loaded here: RTLD_NOLOAD) -- resolves: GOMP_parallel, omp_get_thread_num,
// omp_get_num_threads, omp_get_max_threads, and torch's at::get_num_threads when `path` is
// libtorch_cpu. Installed only where no launcher is (the PyTorch extension's at::parallel_for
// stays, and replaces this one when it binds later) and only when GOMP_parallel comes from a
// library named libgomp* (another OpenMP runtime's GNU shims are not what was tested).
// Returns 0 installed (or already), 1 not found (not loaded, symbols missing, not libgomp),
// 2 another launcher is in place (unchanged). `path` null: back to the own pool if this one is
// installed (0), else 2.
extern "C" __attribute__((visibility("default"))) int psa_tvm_use_gomp(const char* path) {
  std::lock_guard<std::mutex> lock(g_gomp_mu);
  LaunchFn current = g_external.load(std::memory_order_acquire);
  if (path == nullptr) {
    return current == &GompLaunch && g_external.compare_exchange_strong(current, nullptr) ? 0
                                                                                          : 2;
  }
  if (current == &GompLaunch) return 0;
  if (current != nullptr) return 2;
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (handle == nullptr) return 1;
  Gomp gomp;
  gomp.handle = handle;
  *reinterpret_cast<void**>(&gomp.parallel) = dlsym(handle, "GOMP_parallel");
  *reinterpret_cast<void**>(&gomp.thread_num) = dlsym(handle, "omp_get_thread_num");
  *reinterpret_cast<void**>(&gomp.team_size) = dlsym(handle, "omp_get_num_threads");
  *reinterpret_cast<void**>(&gomp.max_threads) = dlsym(handle, "omp_get_max_threads");
  *reinterpret_cast<void**>(&gomp.torch_threads) = dlsym(handle, "_ZN2at15get_num_threadsEv");
  Dl_info info{};
  const char* name = nullptr;
  if (gomp.parallel != nullptr && dladdr(reinterpret_cast<void*>(gomp.parallel), &info) != 0 &&
      info.dli_fname != nullptr) {
    name = strrchr(info.dli_fname, '/');
    name = name != nullptr ? name + 1 : info.dli_fname;
  }
  if (name == nullptr || strncmp(name, "libgomp", 7) != 0 || !gomp.thread_num ||
      !gomp.team_size || !gomp.max_threads) {
    dlclose(handle);
    return 1;
  }
  if (g_gomp.parallel == nullptr) {
    g_gomp = gomp;  // the first install's symbols stay for the process (a launch that read
                    // g_external before a removal may still be using them)
  } else {
    dlclose(handle);
    if (g_gomp.parallel != gomp.parallel) return 1;  // a second OpenMP runtime: not this one
  }
  return g_external.compare_exchange_strong(current, &GompLaunch, std::memory_order_acq_rel)
             ? 0 : 2;
}

// ------------------------------------------------------------------ slice prefetch threshold
// `psa_tvm_cpu_prefetch_bytes()`: calls whose merged tensor has at least this many bytes run
// the CPU kernels that prefetch their slice first (psa_tvm/compiler/rules/cpu_shuffle.py); 0:
// never; -1: `PSA_TVM_CPU_PREFETCH_BYTES` is set but not a whole number of bytes (digits only),
// which both launch paths report as a ValueError naming the variable before any launch, rather
// than fall back to a default the user did not ask for. The variable when set, else a quarter
// of the L3 that cpu0 shares
// (Linux sysfs): the size from which the tensors of back-to-back calls stop staying in the
// caches. Measured (docs/perf.md v31): on a 32 MB L3 guest (8 MB) the prefetch takes 8.8-26 MB
// calls from 2-6x a copy to 1.7-2.6x; on a 300 MB L3 Xeon (75 MB) the same calls sit in L3,
// where the kernels run at 1.0-1.6x without it and the prefetch only costs (+0.03-0.25).
// Both launch paths ask this one function: psa_tvm.runtime.cpu (ctypes) and the native library.
namespace {
int64_t CacheLevelBytes(int level) {
  char path[96];
  for (int index = 0; index < 16; ++index) {
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/level", index);
    FILE* f = fopen(path, "r");
    if (f == nullptr) break;
    int found = 0;
    const bool read_level = fscanf(f, "%d", &found) == 1;
    fclose(f);
    if (!read_level || found != level) continue;
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
    f = fopen(path, "r");
    if (f == nullptr) return 0;
    long long size = 0;
    char unit = 0;
    const int read_size = fscanf(f, "%lld%c", &size, &unit);
    fclose(f);
    if (read_size < 1 || size <= 0) return 0;
    if (read_size == 2 && (unit == 'K' || unit == 'k')) size <<= 10;
    if (read_size == 2 && (unit == 'M' || unit == 'm')) size <<= 20;
    return static_cast<int64_t>(size);
  }
  return 0;
}

int64_t ComputePrefetchBytes() {
  const char* value = getenv("PSA_TVM_CPU_PREFETCH_BYTES");
  if (value == nullptr || *value == '\0') return CacheLevelBytes(3) / 4;
  // Digits only (as psa_tvm.runtime.env reads it): strtoll alone would take "8M" as 8, " 8"
  // and "+8" as 8, and clamp an overflow.
  for (const char* c = value; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9') return -1;
  }
  errno = 0;
  const long long parsed = strtoll(value, nullptr, 10);
  return errno == ERANGE ? -1 : static_cast<int64_t>(parsed);
}
}  // namespace

extern "C" __attribute__((visibility("default"))) int64_t psa_tvm_cpu_prefetch_bytes() {
  static const int64_t bytes = ComputePrefetchBytes();  // read once per process
  return bytes;
}

// ------------------------------------------------------------------ aligned-line forward
// `psa_tvm_cpu_lines()`: whether forwards run the aligned-line kernel
// (psa_tvm/compiler/rules/cpu_lines.py, built for x86-64-v4): 1 yes, 0 no, -1
// `PSA_TVM_CPU_LINES` is malformed, -2 it is `1` on a CPU without AVX-512BW/VL (the kernel would
// fault). `auto` (or unset): Intel CPUs with AVX-512BW and VL, where it was measured faster
// (docs/perf.md v33: Xeon, 16 threads, up to 0.9 lower); not AMD's Zen 4, whose 512-bit
// shuffles and inserts made it 0.2-0.9 slower than the AVX2 kernel there. `0`: never; `1`:
// wherever the CPU has the instructions. Both launch paths ask this one function.
namespace {
int ComputeLines() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool has = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  const bool intel = __builtin_cpu_is("intel");
#else
  const bool has = false, intel = false;
#endif
  const char* value = getenv("PSA_TVM_CPU_LINES");
  if (value == nullptr || *value == '\0' || strcmp(value, "auto") == 0) return has && intel;
  if (strcmp(value, "0") == 0) return 0;
  if (strcmp(value, "1") == 0) return has ? 1 : -2;
  return -1;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) int psa_tvm_cpu_lines() {
  static const int lines = ComputeLines();  // read once per process
  return lines;
}
